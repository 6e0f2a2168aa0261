//! The one stream adapter: every method tagged `stream` in `wit/` is served
//! here, by what the table says (`contract::table::StreamTags`) and by the
//! shape of the resource its function answers. Event streams are followed to
//! their end (collected into the answer, or forwarded as notifications with
//! `stream: true`) or, `detach`ed, pumped into notifications after the answer;
//! byte readers and writers (file contents) go to `bytes`. Which function
//! serves a request (`prefer=`, `when.`) is chosen here too.

use super::bytes;
use super::collect::Collected;
use super::context::CallCtx;
use super::errors::RpcError;
use super::invoke::{self, invoke, not_exported, take_flag, unsupported};
use crate::codec::encode::encode;
use crate::codec::shape::Shape;
use crate::contract::table::{Answer, Callee, Case, Items, Method, Role, StreamTags, Via};
use crate::contract::typed::TypedEvent;
use crate::runtime::{CallError, Instance};
use serde_json::{Map, Value};
use wasmtime::component::{ResourceAny, Val};

// `typed_next`: the typed `next` of streams whose events carry bytes.
include!(concat!(env!("OUT_DIR"), "/typed_next.rs"));

/// A stream's next events through its typed mirror `E`, as (case, payload).
async fn typed_call<E>(
    inst: &mut Instance,
    function: &str,
    stream: ResourceAny,
    batched: bool,
) -> Result<Option<Vec<(&'static str, Value)>>, CallError>
where
    E: TypedEvent + wasmtime::component::ComponentType + wasmtime::component::Lift,
    E: Send + Sync + 'static,
{
    let events = match batched {
        true => {
            inst.call_typed::<_, Option<Vec<E>>>(function, (stream,))
                .await?
        }
        false => inst
            .call_typed::<_, Option<E>>(function, (stream,))
            .await?
            .map(|e| vec![e]),
    };
    Ok(events.map(|events| events.into_iter().map(E::into_event).collect()))
}

/// The adapter's own param: forward events (or chunks) as notifications.
const STREAM: &str = "stream";

/// Serves a stream method.
pub async fn serve(
    ctx: &CallCtx,
    method: &'static Method,
    tags: &'static StreamTags,
    mut params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let (callee, mut taken) = choose(ctx, method, tags, &mut params)?;
    let forward = if forwards(tags) {
        taken.push(STREAM);
        take_flag(method.name, &mut params, STREAM)?
    } else {
        false
    };
    if forward
        && let Some(capability) = tags.forward
        && !ctx.runtime.supports(capability)
    {
        let what = format!("{} with `stream: true`", method.name);
        return Err(unsupported(ctx, &what, capability));
    }
    match &callee.answer {
        Answer::Plain => {
            if forward {
                return Err(answers_at_once(ctx, method, tags, callee));
            }
            invoke::plain(ctx, method, callee.function, params, &taken).await
        }
        Answer::Reader {
            read,
            size,
            read_into,
        } => {
            let fns = bytes::ReaderFns {
                read,
                size: *size,
                read_into: *read_into,
            };
            // Boxed, as the writer below: the byte paths' futures are the
            // largest, and unboxed every request's future would be as large.
            Box::pin(bytes::read(
                ctx,
                method,
                tags,
                callee.function,
                fns,
                params,
                forward,
            ))
            .await
        }
        Answer::Writer {
            write,
            finish,
            write_from,
        } => {
            let writer = bytes::Writer {
                function: callee.function,
                write,
                finish,
                write_from: write_from.filter(|f| ctx.runtime.exports(f)),
            };
            Box::pin(bytes::write(ctx, method, tags, writer, params, forward)).await
        }
        Answer::Events {
            next,
            batched,
            tuple,
            items,
        } => {
            let sandbox_id = params
                .get("sandbox_id")
                .and_then(Value::as_str)
                .map(str::to_string);
            let (mut inst, ok) = invoke(ctx, method, callee.function, params, &taken).await?;
            let (id, stream) = opened(method, callee, ok, *tuple)?;
            let events = Events {
                method,
                tags,
                next,
                batched: *batched,
                items,
                shapes: payloads(ctx, next),
            };
            if tags.detach {
                return Ok(detach(ctx, events, inst, stream, sandbox_id, id));
            }
            let result = events.follow(ctx, &mut inst, stream, forward, id).await;
            if inst.drop_resource(stream).await && result.is_ok() {
                ctx.runtime.give_back(inst);
            }
            result
        }
    }
}

/// Whether `method` takes `stream: true` (it forwards its events or chunks as
/// notifications).
pub fn forwards_stream(method: &Method) -> bool {
    method.stream.is_some_and(forwards)
}

/// Whether the method takes `stream` (forwarding instead of collecting): one
/// of its functions answers an event stream with something to collect, or a
/// reader or writer.
fn forwards(tags: &StreamTags) -> bool {
    tags.callees.iter().any(|c| match &c.answer {
        Answer::Plain => false,
        Answer::Reader { .. } | Answer::Writer { .. } => true,
        Answer::Events { items, .. } => {
            !tags.detach
                && matches!(items, Items::Cases(cases)
                    if cases.iter().any(|c| matches!(c.role, Role::Text | Role::Item(_))))
        }
    })
}

/// The function that serves this request: the `when.` one its params select
/// (its flag consumed), else `prefer=` when the component exports it, else
/// the method's own. Answers it and the params it consumed.
fn choose(
    ctx: &CallCtx,
    method: &Method,
    tags: &'static StreamTags,
    params: &mut Map<String, Value>,
) -> Result<(&'static Callee, Vec<&'static str>), RpcError> {
    let mut taken = Vec::new();
    let mut chosen = None;
    for callee in tags.callees {
        let Via::When { param, is_param } = callee.via else {
            continue;
        };
        let given = if is_param {
            params.get(param).is_some_and(|v| !v.is_null())
        } else {
            taken.push(param);
            take_flag(method.name, params, param)?
        };
        if !given {
            continue;
        }
        if let Some((other, _)) = chosen {
            return Err(RpcError::invalid_params(
                method.name,
                format!(
                    "`{other}` and `{param}` cannot both be given: each asks for another kind of call; leave one out"
                ),
            ));
        }
        chosen = Some((param, callee));
    }
    if let Some((param, callee)) = chosen {
        if !ctx.runtime.exports(callee.function) {
            let what = format!("{} with `{param}`", method.name);
            return Err(not_exported(ctx, &what, callee.function));
        }
        return Ok((callee, taken));
    }
    let prefer = tags
        .callees
        .iter()
        .find(|c| c.via == Via::Prefer && ctx.runtime.exports(c.function));
    let main = &tags.callees[0];
    Ok((prefer.unwrap_or(main), taken))
}

/// `stream: true` for a function that answers at once, without a stream.
fn answers_at_once(ctx: &CallCtx, method: &Method, tags: &StreamTags, callee: &Callee) -> RpcError {
    match callee.via {
        Via::When { param, .. } => RpcError::invalid_params(
            method.name,
            format!(
                "`{param}` and `stream` cannot both be true: with `{param}` the call answers at \
                 once, without a stream to forward"
            ),
        ),
        // The component lacks the streaming function (an older contract).
        _ => match tags.callees.iter().find(|c| c.via == Via::Prefer) {
            Some(prefer) => {
                let what = format!("{} with `stream: true`", method.name);
                not_exported(ctx, &what, prefer.function)
            }
            None => RpcError::invalid_params(
                method.name,
                "`stream: true` does not apply: the call answers at once",
            ),
        },
    }
}

/// The stream a function answered, and the id beside it (`tuple<string, stream>`).
fn opened(
    method: &Method,
    callee: &Callee,
    ok: Option<Val>,
    tuple: bool,
) -> Result<(Option<String>, ResourceAny), RpcError> {
    let wrong = || {
        RpcError::fault(format!(
            "`{}` (for {}) did not answer the stream its type promises",
            callee.function, method.name
        ))
    };
    match (ok, tuple) {
        (Some(Val::Resource(r)), false) => Ok((None, r)),
        (Some(Val::Tuple(pair)), true) => match <[Val; 2]>::try_from(pair) {
            Ok([Val::String(id), Val::Resource(r)]) => Ok((Some(id), r)),
            _ => Err(wrong()),
        },
        _ => Err(wrong()),
    }
}

/// The payload shapes of the items `next` yields, by case (or the record's).
fn payloads(ctx: &CallCtx, next: &str) -> Vec<(String, Option<Shape>)> {
    let item = match ctx.codec.ok_shape(next) {
        Some(Shape::Option(inner)) => match inner.as_ref() {
            Shape::List(item) => item.as_ref().clone(),
            other => other.clone(),
        },
        _ => return Vec::new(),
    };
    match item {
        Shape::Variant(cases) => cases.into_iter().map(|c| (c.name.wit, c.payload)).collect(),
        record => vec![(String::new(), Some(record))],
    }
}

/// An event stream being served.
struct Events {
    method: &'static Method,
    tags: &'static StreamTags,
    next: &'static str,
    batched: bool,
    items: &'static Items,
    shapes: Vec<(String, Option<Shape>)>,
}

/// One event, with what the table says of it, its payload as JSON (null
/// without one).
struct Event {
    case: Option<&'static Case>,
    json: Value,
}

impl Events {
    /// The next events: none at the stream's end; a batch must not be empty.
    async fn next(
        &self,
        inst: &mut Instance,
        stream: ResourceAny,
    ) -> Result<Option<Vec<Event>>, RpcError> {
        let events = match typed_next(inst, self.next, stream, self.batched).await {
            Some(Ok(events)) => events.map(|events| {
                events
                    .into_iter()
                    .map(|(case, json)| self.typed_event(case, json))
                    .collect::<Result<Vec<_>, _>>()
            }),
            // Not the contract's type (another version of the component):
            // the dynamic path reads it.
            Some(Err(CallError::Contract(_))) | None => {
                return self.next_dynamic(inst, stream).await;
            }
            Some(Err(e)) => return Err(e.into()),
        };
        match events.transpose()? {
            Some(events) if events.is_empty() => Err(self.empty_batch()),
            events => Ok(events),
        }
    }

    fn typed_event(&self, case: &str, json: Value) -> Result<Event, RpcError> {
        let Items::Cases(cases) = self.items else {
            return Err(self.bad("a typed event of a stream of records"));
        };
        let case = cases
            .iter()
            .find(|c| c.wit == case)
            .ok_or_else(|| self.bad(&format!("an unknown event `{case}`")))?;
        Ok(Event {
            case: Some(case),
            json,
        })
    }

    fn empty_batch(&self) -> RpcError {
        RpcError::fault(format!(
            "the provider's stream for {} returned a batch with no event (`{}` must wait for at \
             least one); report this provider bug",
            self.method.name, self.next
        ))
    }

    /// The next events through `Val`s.
    async fn next_dynamic(
        &self,
        inst: &mut Instance,
        stream: ResourceAny,
    ) -> Result<Option<Vec<Event>>, RpcError> {
        let ok = inst.call(self.next, &[Val::Resource(stream)]).await?;
        let vals = match ok {
            Some(Val::Option(None)) => return Ok(None),
            Some(Val::Option(Some(v))) => match (*v, self.batched) {
                (Val::List(items), true) => items,
                (item, false) => vec![item],
                _ => return Err(self.bad("a batch that is not a list")),
            },
            _ => return Err(self.bad("no option")),
        };
        if vals.is_empty() {
            return Err(self.empty_batch());
        }
        vals.into_iter()
            .map(|v| self.event(v))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    fn bad(&self, what: &str) -> RpcError {
        RpcError::fault(format!(
            "`{}` (for {}) answered {what}",
            self.next, self.method.name
        ))
    }

    fn event(&self, val: Val) -> Result<Event, RpcError> {
        let Items::Cases(cases) = self.items else {
            let shape = self.shapes.first().and_then(|(_, s)| s.as_ref());
            return Ok(Event {
                case: None,
                json: json_of(Some(val), shape)?,
            });
        };
        let Val::Variant(name, payload) = val else {
            return Err(self.bad("an event that is not a variant case"));
        };
        let case = cases
            .iter()
            .find(|c| c.wit == name)
            .ok_or_else(|| self.bad(&format!("an unknown event `{name}`")))?;
        let shape = self
            .shapes
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, s)| s.as_ref());
        Ok(Event {
            case: Some(case),
            json: json_of(payload.map(|p| *p), shape)?,
        })
    }

    /// The name of the last event, for messages.
    fn end_name(&self) -> &'static str {
        match self.items {
            Items::Cases(cases) => cases
                .iter()
                .find(|c| matches!(c.role, Role::End(_)))
                .map_or("end", |c| c.wit),
            Items::Records => "end",
        }
    }

    /// Follows the stream to its end: the answer, with what was collected
    /// (or, forwarding, with the events sent as notifications on the way).
    async fn follow(
        &self,
        ctx: &CallCtx,
        inst: &mut Instance,
        stream: ResourceAny,
        forward: bool,
        mut id: Option<String>,
    ) -> Result<Value, RpcError> {
        let (texts, lists) = collected_keys(self.items);
        let mut collected = Collected::new(ctx.max_output_bytes, &texts, &lists);
        let mut kept = Map::new();
        loop {
            let Some(events) = self.next(inst, stream).await? else {
                if matches!(self.items, Items::Records) {
                    return Ok(Value::Object(Map::new()));
                }
                return Err(RpcError::fault(format!(
                    "the provider ended the stream of {} before its last event (`{}`); its \
                     outcome is unknown",
                    self.method.name,
                    self.end_name()
                )));
            };
            // Consecutive text of one output stream goes out as one notification.
            let mut pending: Option<(&'static Case, String)> = None;
            for event in events {
                let Some(case) = event.case else {
                    let note = self.tags.note.unwrap_or_default();
                    ctx.notify(note, object(event.json)).await;
                    continue;
                };
                if case.role == Role::Text {
                    let Value::String(text) = event.json else {
                        return Err(self.bad("a text event without text"));
                    };
                    match &mut pending {
                        Some((c, buf)) if std::ptr::eq(*c, case) => buf.push_str(&text),
                        _ => {
                            flush(ctx, &mut pending, forward, &mut collected).await;
                            pending = Some((case, text));
                        }
                    }
                    continue;
                }
                flush(ctx, &mut pending, forward, &mut collected).await;
                match case.role {
                    Role::Id => {
                        let Value::String(text) = event.json else {
                            return Err(self.bad("an id that is not a string"));
                        };
                        if forward && let (Some(note), Some(key)) = (case.note, self.tags.id) {
                            let mut params = Map::new();
                            params.insert(key.into(), Value::String(text.clone()));
                            ctx.notify(note, params).await;
                        }
                        id = Some(text);
                    }
                    Role::Item(key) => {
                        let value = event.json;
                        if forward {
                            ctx.notify(case.note.unwrap_or_default(), object(value))
                                .await;
                        } else {
                            let size = value.to_string().len();
                            collected.push_item(key, value, size);
                        }
                    }
                    Role::Forward => {
                        let note = case.note.unwrap_or_default();
                        ctx.notify(note, object(event.json)).await;
                    }
                    Role::Keep(key) => {
                        kept.insert(key.into(), event.json);
                    }
                    Role::End(key) => {
                        let mut answer = Map::new();
                        if let Some(id_key) = self.tags.id {
                            answer.insert(id_key.into(), id.map_or(Value::Null, Value::String));
                        }
                        answer.extend(end_fields(key, event.json));
                        answer.extend(kept);
                        if !forward {
                            let truncated = collected.truncated;
                            answer.extend(collected.into_fields().map(|(k, v)| (k.into(), v)));
                            if truncated {
                                answer.insert("truncated".into(), Value::Bool(true));
                            }
                        }
                        return Ok(Value::Object(answer));
                    }
                    Role::Text => unreachable!("handled above"),
                }
            }
            flush(ctx, &mut pending, forward, &mut collected).await;
        }
    }
}

/// What a collected answer always carries: each text case's stream and each
/// item list, empty when nothing came.
fn collected_keys(items: &Items) -> (Vec<&'static str>, Vec<&'static str>) {
    let Items::Cases(cases) = items else {
        return (Vec::new(), Vec::new());
    };
    let texts = cases
        .iter()
        .filter(|c| c.role == Role::Text)
        .map(|c| c.wire)
        .collect();
    let lists = cases
        .iter()
        .filter_map(|c| match c.role {
            Role::Item(key) => Some(key),
            _ => None,
        })
        .collect();
    (texts, lists)
}

/// Sends (or collects) buffered text of one output stream.
async fn flush(
    ctx: &CallCtx,
    pending: &mut Option<(&'static Case, String)>,
    forward: bool,
    collected: &mut Collected,
) {
    let Some((case, text)) = pending.take() else {
        return;
    };
    if text.is_empty() {
        return;
    }
    match (forward, case.note) {
        (true, Some(note)) => {
            let mut params = Map::with_capacity(3);
            params.insert("stream".into(), Value::from(case.wire));
            params.insert("data".into(), Value::String(text));
            ctx.notify(note, params).await;
        }
        _ => collected.push_text(case.wire, &text),
    }
}

/// A payload as JSON (null without one); consumed, so its strings move.
fn json_of(payload: Option<Val>, shape: Option<&Shape>) -> Result<Value, RpcError> {
    match (payload, shape) {
        (Some(val), Some(shape)) => encode(shape, val)
            .map_err(|e| RpcError::fault(format!("the provider's event could not be read: {e}"))),
        _ => Ok(Value::Null),
    }
}

/// A notification's params: a record's fields, or any other value as `data`.
fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => {
            let mut map = Map::with_capacity(1);
            map.insert("data".into(), other);
            map
        }
    }
}

/// What the last event puts in the answer: its record's fields (an absent
/// option left out), or its value under `key`.
fn end_fields(key: Option<&str>, value: Value) -> Map<String, Value> {
    match (key, value) {
        (Some(key), value) => {
            let mut map = Map::with_capacity(1);
            map.insert(key.into(), value);
            map
        }
        (None, Value::Object(fields)) => fields.into_iter().filter(|(_, v)| !v.is_null()).collect(),
        (None, _) => Map::new(),
    }
}

/// Answers at once with the stream's id, and pumps its events into
/// notifications that name `sandbox_id` and the id, in a task of its own that
/// owns the instance (input, resize and kill arrive as other requests). The
/// last notification is the end case's, with `error` when the stream broke off.
fn detach(
    ctx: &CallCtx,
    events: Events,
    mut inst: Instance,
    stream: ResourceAny,
    sandbox_id: Option<String>,
    id: Option<String>,
) -> Value {
    let id_key = events.tags.id.unwrap_or("id");
    let mut names = Map::new();
    if let Some(sandbox) = sandbox_id {
        names.insert("sandbox_id".into(), Value::String(sandbox));
    }
    names.insert(id_key.into(), id.map_or(Value::Null, Value::String));
    let answer = Value::Object(Map::from_iter([(
        id_key.to_string(),
        names[id_key].clone(),
    )]));
    let out = ctx.out.clone();
    // Output must not overtake the answer that tells the client the id.
    let released = ctx.after_response();
    ctx.background.lock().expect("lock").spawn(async move {
        let _ = released.await;
        let end_case = match events.items {
            Items::Cases(cases) => cases.iter().find(|c| matches!(c.role, Role::End(_))),
            Items::Records => None,
        };
        let note = |fields: Map<String, Value>| {
            let mut params = names.clone();
            params.extend(fields);
            Value::Object(params)
        };
        let mut kept = Map::new();
        let ended = loop {
            let batch = match events.next(&mut inst, stream).await {
                Ok(Some(batch)) => batch,
                Ok(None) => {
                    break Err(format!(
                        "{}'s stream closed before its end",
                        events.method.name
                    ));
                }
                Err(e) => break Err(e.wire_message().into_owned()),
            };
            let mut end = None;
            for event in batch {
                let Some(case) = event.case else {
                    if let Some(name) = events.tags.note {
                        out.notify(name, note(object(event.json))).await;
                    }
                    continue;
                };
                match case.role {
                    Role::End(key) => {
                        end = Some(Ok(end_fields(key, event.json)));
                        break;
                    }
                    Role::Keep(key) => {
                        kept.insert(key.into(), event.json);
                    }
                    // The id is the answer's already.
                    Role::Id => {}
                    Role::Text => {
                        let mut params = Map::with_capacity(2);
                        params.insert("stream".into(), Value::from(case.wire));
                        params.insert("data".into(), event.json);
                        if let Some(name) = case.note {
                            out.notify(name, note(params)).await;
                        }
                    }
                    Role::Item(_) | Role::Forward => {
                        if let Some(name) = case.note {
                            out.notify(name, note(object(event.json))).await;
                        }
                    }
                }
            }
            if let Some(end) = end {
                break end;
            }
        };
        inst.drop_resource(stream).await;
        let Some(case) = end_case else {
            return;
        };
        let mut fields = match ended {
            Ok(fields) => fields,
            Err(error) => {
                let mut fields = end_fields(
                    match case.role {
                        Role::End(key) => key,
                        _ => None,
                    },
                    Value::Null,
                );
                fields.insert("error".into(), Value::String(error));
                fields
            }
        };
        fields.extend(kept);
        if let Some(name) = case.note {
            out.notify(name, note(fields)).await;
        }
    });
    answer
}
