//! One ext_proc stream: Envoy's messages handed to the request's [`Exchange`] and its steps
//! handed back as Envoy's replies, in order.

use super::convert;
use super::reply::Reply;
use crate::engine::exchange::Exchange;
use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingRequest;
use std::future::Future;

/// The exchange behind one ext_proc stream.
pub struct StreamState {
    exchange: Exchange,
}

impl StreamState {
    /// The stream of `exchange`.
    pub fn new(exchange: Exchange) -> Self {
        Self { exchange }
    }

    /// Replies to a message held back by [`StreamState::handle`]; `None` when nothing is held.
    pub async fn resume(&mut self) -> Option<Reply> {
        self.exchange.resume().await.map(convert::reply)
    }

    /// Replies to one message from Envoy; `None` when the message carries no phase.
    pub async fn handle(&mut self, message: ProcessingRequest) -> Option<Reply> {
        Some(self.reply_to(message)?.await)
    }

    /// The reply to one message from Envoy, as [`StreamState::handle`], with the message taken
    /// apart first: the reply's future holds only what the exchange reads.
    pub fn reply_to(
        &mut self,
        message: ProcessingRequest,
    ) -> Option<impl Future<Output = Reply> + Send + '_> {
        let message = convert::message(message)?;
        Some(async move { convert::reply(self.exchange.handle(message).await) })
    }

    /// Envoy's stream broke before the exchange ended.
    pub fn broke(&self) {
        self.exchange.broke();
    }
}
