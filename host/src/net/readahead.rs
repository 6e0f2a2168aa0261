//! Read-ahead for streamed (chunked) response bodies.
//!
//! hyper hands a response body over one chunk at a time and decodes the next
//! chunk only once the previous one was taken. A server that streams events
//! (server-sent events, logs, a command's output) commonly writes each event
//! as a chunk of its own, so a guest reading such a stream would cross into
//! the host, and wait for hyper's connection task, once per event. Here a pump
//! task takes chunks as they arrive, up to a byte budget, and `poll_frame`
//! hands out everything already pumped as one frame (at most `MAX_FRAME`
//! bytes). The constants hold for any provider and backend: they bound host
//! memory per stream and the bytes copied into a guest per read.
//!
//! Nothing else changes for the reader: frames keep their order, errors and
//! trailers are passed on as they come. When the reader drops the body early
//! (the guest stops at a command's last event), the pump reads what is left
//! for a moment (`DRAIN_TIME`, `DRAIN_BYTES`) and throws it away: a response
//! that ends right after its last event then leaves its connection to be
//! reused, where dropping hyper's body would close it. Anything longer is cut
//! off as before. A body whose connection will not be reused anyway (the
//! answer to a `POST`, see `outbound`) is not drained.

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Largest frame handed out at once: what one guest read of the body may copy
/// into its memory (a quarter of wasi:http's 1 MiB body chunk), whatever the
/// guest asks for; a larger read gets the rest on its next call.
const MAX_FRAME: usize = 256 << 10;
/// Bytes pumped ahead of the reader at most (memory per streamed response).
/// Measured on a 64 MiB stream: with 256 KiB the pump stalled often and the
/// host used ~30 % more CPU (more, smaller batches); 2 MiB gained nothing.
const BUDGET: usize = 4 * MAX_FRAME;
/// After the reader left: how long, and how many bytes, the rest is read for.
const DRAIN_TIME: Duration = Duration::from_millis(100);
const DRAIN_BYTES: usize = 64 << 10;

type Item<E> = Result<Frame<Bytes>, E>;

pub struct ReadAhead<E> {
    rx: mpsc::UnboundedReceiver<Item<E>>,
    budget: Arc<Semaphore>,
    /// Taken while joining frames but not joinable (trailers, an error, too big).
    held: Option<Item<E>>,
    /// Dropped with the body: tells the pump the reader is gone.
    _gone: oneshot::Sender<()>,
}

/// Budget a frame takes: its data length, at least 1 so empty frames count too.
fn cost<E>(item: &Item<E>) -> usize {
    let len = item
        .as_ref()
        .ok()
        .and_then(Frame::data_ref)
        .map_or(0, Bytes::len);
    len.clamp(1, BUDGET)
}

impl<E: Send + 'static> ReadAhead<E> {
    /// Starts pumping `body` (must be called inside the tokio runtime);
    /// `reusable`: whether its connection goes back to a pool, so that reading
    /// the rest after the reader left is worth it.
    pub fn new<B>(mut body: B, reusable: bool) -> Self
    where
        B: Body<Data = Bytes, Error = E> + Send + Unpin + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let budget = Arc::new(Semaphore::new(BUDGET));
        let permits = budget.clone();
        let (gone, reader_gone) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let forward = async {
                while let Some(item) = body.frame().await {
                    // BUDGET permits exist and no frame costs more, so this
                    // waits only for the reader.
                    let Ok(taken) = permits.acquire_many(cost(&item) as u32).await else {
                        return false;
                    };
                    taken.forget();
                    if tx.send(item).is_err() {
                        return false;
                    }
                }
                true
            };
            let ended = tokio::select! {
                ended = forward => ended,
                _ = reader_gone => false,
            };
            if !ended && reusable {
                drain(&mut body).await;
            }
        });
        ReadAhead {
            rx,
            budget,
            held: None,
            _gone: gone,
        }
    }

    fn take(&mut self, cx: &mut Context<'_>) -> Poll<Option<Item<E>>> {
        if let Some(item) = self.held.take() {
            return Poll::Ready(Some(item));
        }
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(item)) = &polled {
            self.budget.add_permits(cost(item));
        }
        polled
    }
}

/// Reads what is left of a body the reader gave up on, briefly; if it ends,
/// hyper can reuse the connection. Dropping `body` after that closes it.
async fn drain<B: Body<Data = Bytes> + Unpin>(body: &mut B) {
    let rest = async {
        let mut left = DRAIN_BYTES;
        while let Some(Ok(frame)) = body.frame().await {
            let len = frame.data_ref().map_or(0, Bytes::len);
            if len > left {
                return;
            }
            left -= len;
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, rest).await;
}

// Nothing in a `ReadAhead` is pinned in place (no field is polled through `Pin`).
impl<E> Unpin for ReadAhead<E> {}

impl<E: Send + 'static> Body for ReadAhead<E> {
    type Data = Bytes;
    type Error = E;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        let this = self.get_mut();
        let first = match this.take(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let first = match first.into_data() {
            Ok(data) => data,
            Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
        };
        // Join the data frames that are already here, copied once into a
        // buffer of their joined size: a buffer of MAX_FRAME for every join
        // cost a 256 KiB allocation per small event.
        let mut rest: Vec<Bytes> = Vec::new();
        let mut size = first.len();
        while size < MAX_FRAME {
            let Ok(item) = this.rx.try_recv() else {
                break;
            };
            this.budget.add_permits(cost(&item));
            match item {
                Ok(frame)
                    if frame
                        .data_ref()
                        .is_some_and(|d| size + d.len() <= MAX_FRAME) =>
                {
                    let data = frame.into_data().unwrap_or_default();
                    size += data.len();
                    rest.push(data);
                }
                other => {
                    this.held = Some(other);
                    break;
                }
            }
        }
        let data = if rest.is_empty() {
            first
        } else {
            let mut joined = BytesMut::with_capacity(size);
            joined.extend_from_slice(&first);
            rest.iter().for_each(|data| joined.extend_from_slice(data));
            joined.freeze()
        };
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    fn body(items: Vec<Result<Frame<Bytes>, String>>) -> ReadAhead<String> {
        let stream = futures::stream::iter(items);
        ReadAhead::new(StreamBody::new(stream), true)
    }

    async fn all(mut b: ReadAhead<String>) -> Vec<Result<Frame<Bytes>, String>> {
        // Let the pump run ahead so frames are joined.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut out = Vec::new();
        while let Some(item) = b.frame().await {
            out.push(item);
        }
        out
    }

    #[tokio::test]
    async fn joins_small_frames_and_keeps_order() {
        let items = (0..100)
            .map(|i| Ok(Frame::data(Bytes::from(format!("{i},")))))
            .collect();
        let out = all(body(items)).await;
        let text: String = out
            .iter()
            .map(|f| String::from_utf8(f.as_ref().unwrap().data_ref().unwrap().to_vec()).unwrap())
            .collect();
        let want: String = (0..100).map(|i| format!("{i},")).collect();
        assert_eq!(text, want);
        assert!(out.len() < 100, "{} frames were not joined", out.len());
    }

    #[tokio::test]
    async fn errors_and_trailers_pass_in_order() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-t", http::HeaderValue::from_static("1"));
        let items = vec![
            Ok(Frame::data(Bytes::from_static(b"a"))),
            Ok(Frame::data(Bytes::from_static(b"b"))),
            Ok(Frame::trailers(trailers)),
            Err("broken".to_string()),
        ];
        let out = all(body(items)).await;
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].as_ref().unwrap().data_ref().unwrap(), "ab");
        assert!(out[1].as_ref().unwrap().is_trailers());
        assert_eq!(out[2].as_ref().unwrap_err(), "broken");
    }

    /// Pumps a body that never ends, drops the reader after its first frame
    /// and waits `wait`: whether the pump let go of the body by then.
    async fn let_go_after(reusable: bool, wait: std::time::Duration) -> bool {
        let (tx, rx) = mpsc::unbounded_channel::<Result<Frame<Bytes>, String>>();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let reader = ReadAhead::new(StreamBody::new(Box::pin(stream)), reusable);
        tx.send(Ok(Frame::data(Bytes::from_static(b"x")))).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        drop(reader);
        tokio::time::sleep(wait).await;
        tx.is_closed()
    }

    #[tokio::test]
    async fn a_dropped_reader_stops_the_pump_soon() {
        let after = DRAIN_TIME + std::time::Duration::from_millis(100);
        assert!(
            let_go_after(true, after).await,
            "the pump still holds the body"
        );
    }

    #[tokio::test]
    async fn a_body_not_to_be_reused_is_let_go_at_once() {
        assert!(
            let_go_after(false, DRAIN_TIME / 5).await,
            "the pump drains a body that is not reused"
        );
        // ... where a reusable one is still being drained then.
        assert!(!let_go_after(true, DRAIN_TIME / 5).await);
    }

    #[tokio::test]
    async fn big_frames_stay_whole_and_the_budget_bounds_the_pump() {
        let big = Bytes::from(vec![7u8; MAX_FRAME]);
        let items = (0..8).map(|_| Ok(Frame::data(big.clone()))).collect();
        let b = body(items);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // The pump stops once BUDGET bytes wait unread.
        assert!(
            b.rx.len() <= BUDGET / MAX_FRAME,
            "{} frames pumped",
            b.rx.len()
        );
        let out = all(b).await;
        assert_eq!(out.len(), 8);
        assert!(
            out.iter()
                .all(|f| f.as_ref().unwrap().data_ref().unwrap().len() == MAX_FRAME)
        );
    }
}
