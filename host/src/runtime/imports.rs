//! The host side of the world's own imports: `abx:epp/websocket`,
//! `abx:epp/memo` and `abx:epp/request`.

use super::state::StoreState;
use crate::contract::bindings::abx::epp::{memo, request, types, websocket};
use crate::contract::bindings::{EppError, ErrorCode};
use crate::net::websocket::{Message, WsError};
use std::time::Duration;

impl types::Host for StoreState {}

fn ws_error(e: WsError) -> EppError {
    let (code, message, http_status) = match e {
        WsError::Denied(m) => (ErrorCode::DeniedByPolicy, m, None),
        WsError::InvalidArgument(m) => (ErrorCode::InvalidArgument, m, None),
        WsError::Conflict(m) => (ErrorCode::Conflict, m, None),
        WsError::NotFound(m) => (ErrorCode::NotFound, m, None),
        WsError::Unreachable(m) => (ErrorCode::Unreachable, m, None),
        WsError::Upstream { status, message } => (ErrorCode::Upstream, message, status),
        WsError::TimedOut(m) => (ErrorCode::TimedOut, m, None),
        WsError::Limit(m) => (ErrorCode::ProviderFault, m, None),
    };
    EppError {
        code,
        message,
        http_status,
        upstream_code: None,
    }
}

impl websocket::Host for StoreState {
    async fn connect(
        &mut self,
        key: String,
        url: String,
        headers: Vec<(String, String)>,
    ) -> Result<(), EppError> {
        self.shared
            .sockets
            .connect(key, &url, headers)
            .await
            .map_err(ws_error)
    }

    async fn send(&mut self, key: String, msg: websocket::Message) -> Result<(), EppError> {
        let msg = match msg {
            websocket::Message::Text(t) => Message::Text(t),
            websocket::Message::Binary(b) => Message::Binary(b),
            websocket::Message::Close((code, reason)) => Message::Close(code, reason),
        };
        self.shared.sockets.send(&key, msg).await.map_err(ws_error)
    }

    async fn receive(&mut self, key: String) -> Result<Option<websocket::Message>, EppError> {
        let msg = self.shared.sockets.receive(&key).await.map_err(ws_error)?;
        Ok(msg.map(|m| match m {
            Message::Text(t) => websocket::Message::Text(t),
            Message::Binary(b) => websocket::Message::Binary(b),
            Message::Close(code, reason) => websocket::Message::Close((code, reason)),
        }))
    }

    async fn close(&mut self, key: String, code: u16, reason: String) {
        self.shared.sockets.close(&key, code, reason).await
    }

    async fn is_open(&mut self, key: String) -> bool {
        self.shared.sockets.is_open(&key)
    }
}

impl memo::Host for StoreState {
    async fn get(&mut self, key: String) -> Option<String> {
        self.shared.memo.get(&key)
    }

    async fn put(&mut self, key: String, value: String, ttl_ms: u32) {
        self.shared
            .memo
            .put(key, value, Duration::from_millis(u64::from(ttl_ms)))
    }

    async fn forget(&mut self, key: String) {
        self.shared.memo.forget(&key)
    }
}

impl request::Host for StoreState {
    async fn time_left_ms(&mut self) -> Option<u64> {
        self.call.deadline.map(|at| {
            let left = at.saturating_duration_since(std::time::Instant::now());
            u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
        })
    }

    async fn provider_options(&mut self) -> Vec<(String, String)> {
        self.shared.options.clone()
    }

    async fn made(&mut self, token: String) {
        self.call.tokens.made(token)
    }

    async fn settled(&mut self, token: String) {
        self.call.tokens.settled(&token)
    }
}
