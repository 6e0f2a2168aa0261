//! The host's ends of a reader's `read-into` and a writer's `write-from`
//! (abx:epp 1.3): file contents move between the host and the provider's HTTP
//! bodies as `Bytes`, by the provider's `splice`, without being copied into its
//! linear memory and lifted out again. Each call gets a stream of its own in
//! the store's table, removed when the call returns, so a kept instance
//! holds none.
//!
//! The sink takes at most the `max` the call was given, at once: it never
//! waits, so a provider that asks for more room is told that it is full (an
//! error, not a hang), and host memory per call stays bounded by `max`.

use super::call::{CallError, Instance};
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use wasmtime::component::{ComponentType, Lift, Resource, ResourceAny};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, InputStream, OutputStream, Pollable, StreamError, StreamResult,
};

/// What a sink took during one call.
#[derive(Default)]
struct Taken {
    /// Bytes it still takes.
    room: usize,
    chunks: Vec<Bytes>,
}

/// An `output-stream` that keeps what is written to it, up to its room.
struct Sink(Arc<Mutex<Taken>>);

impl Sink {
    fn full(room: usize) -> StreamError {
        StreamError::LastOperationFailed(wasmtime::format_err!(
            "the host's sink is full: it takes at most `max` bytes per read-into call, {room} \
             more now"
        ))
    }
}

#[async_trait::async_trait]
impl Pollable for Sink {
    async fn ready(&mut self) {}
}

#[async_trait::async_trait]
impl OutputStream for Sink {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut taken = self.0.lock().expect("sink lock");
        if bytes.len() > taken.room {
            return Err(Sink::full(taken.room));
        }
        taken.room -= bytes.len();
        if !bytes.is_empty() {
            taken.chunks.push(bytes);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        match self.0.lock().expect("sink lock").room {
            0 => Err(Sink::full(0)),
            room => Ok(room),
        }
    }

    /// Takes the bytes as they are: the default would wait for room after
    /// them, which a sink filled to the brim never has.
    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write(bytes)
    }
}

/// An `input-stream` holding the bytes of one chunk; empty, not closed, once
/// they are read (the provider was told how many to take).
struct Source(Arc<Mutex<Bytes>>);

#[async_trait::async_trait]
impl Pollable for Source {
    async fn ready(&mut self) {}
}

#[async_trait::async_trait]
impl InputStream for Source {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        let mut left = self.0.lock().expect("source lock");
        let n = size.min(left.len());
        Ok(left.split_to(n))
    }
}

fn trap(e: impl Into<wasmtime::Error>) -> CallError {
    CallError::Trap(e.into())
}

impl Instance {
    /// Calls `function(resource, stream, n)`, lending it `stream` from the
    /// store's table for the call only.
    async fn lend<S, R>(
        &mut self,
        function: &str,
        resource: ResourceAny,
        stream: S,
        n: u64,
    ) -> Result<R, CallError>
    where
        S: Send + 'static,
        R: ComponentType + Lift + Send + Sync + 'static,
    {
        let pushed = self.store.data_mut().table().push(stream).map_err(trap)?;
        let lent = Resource::<S>::new_borrow(pushed.rep());
        let answer = self.call_typed(function, (resource, lent, n)).await;
        let removed = self.store.data_mut().table().delete(pushed);
        let answer = answer?;
        removed.map_err(trap)?;
        Ok(answer)
    }

    /// Calls a reader's `read-into` with a sink of `max` bytes: the bytes the
    /// provider moved into it (possibly none), or none at the end.
    pub async fn read_into(
        &mut self,
        function: &str,
        reader: ResourceAny,
        max: usize,
    ) -> Result<Option<Vec<Bytes>>, CallError> {
        let taken = Arc::new(Mutex::new(Taken {
            room: max,
            ..Taken::default()
        }));
        let sink: DynOutputStream = Box::new(Sink(taken.clone()));
        let answer: Option<u64> = self.lend(function, reader, sink, max as u64).await?;
        let Taken { room, chunks } = std::mem::take(&mut *taken.lock().expect("sink lock"));
        let len = max - room;
        match answer {
            Some(said) if said == len as u64 => Ok(Some(chunks)),
            None if len == 0 => Ok(None),
            said => Err(CallError::Contract(format!(
                "`{function}` moved {len} bytes into the host's sink but answered {}",
                said.map_or("the end".to_string(), |n| format!("{n} bytes"))
            ))),
        }
    }

    /// Calls a writer's `write-from` with a source holding `bytes`, which the
    /// provider must take whole.
    pub async fn write_from(
        &mut self,
        function: &str,
        writer: ResourceAny,
        bytes: Bytes,
    ) -> Result<(), CallError> {
        let len = bytes.len() as u64;
        let held = Arc::new(Mutex::new(bytes));
        let source: DynInputStream = Box::new(Source(held.clone()));
        self.lend::<_, ()>(function, writer, source, len).await?;
        match held.lock().expect("source lock").len() {
            0 => Ok(()),
            left => Err(CallError::Contract(format!(
                "`{function}` answered ok but left {left} of its {len} bytes unread"
            ))),
        }
    }
}
