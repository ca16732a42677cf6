//! Where messages go that cannot be applied: [`DeadLetter`].

use async_nats::jetstream::{self, message::PublishMessage};

/// Header naming the consumer that gave the message up.
pub const DEAD_CONSUMER: &str = "Outbox-Dead-Consumer";
/// Header with the reason (the last error, cut to 1 KiB).
pub const DEAD_REASON: &str = "Outbox-Dead-Reason";
/// Header with the message's sequence in its original stream.
pub const DEAD_SEQUENCE: &str = "Outbox-Dead-Stream-Sequence";
/// Header with how many deliveries were tried.
pub const DEAD_DELIVERED: &str = "Outbox-Dead-Delivered";

/// The longest reason carried, in bytes.
const MAX_REASON: usize = 1024;

/// A JetStream subject that receives a copy of every message the consumer
/// gives up, before the original is terminated (`+TERM`).
///
/// The copy keeps the payload and every header of the original, adds
/// [`DEAD_CONSUMER`], [`DEAD_REASON`], [`DEAD_SEQUENCE`] and
/// [`DEAD_DELIVERED`], and has the message id `<original id>:dead:<consumer>`,
/// so a copy published twice (the consumer crashed before the `+TERM`) is
/// stored once. The subject must be captured by a stream, and must not be
/// one the consumer itself reads.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    jetstream: jetstream::Context,
    subject: String,
}

impl DeadLetter {
    /// Dead letters go to `subject` through `jetstream`.
    pub fn new(jetstream: jetstream::Context, subject: impl Into<String>) -> Self {
        Self {
            jetstream,
            subject: subject.into(),
        }
    }

    /// The subject dead letters go to.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Publishes the copy and waits for the stream's acknowledgement.
    pub(crate) async fn publish(
        &self,
        original: &async_nats::Message,
        copy: Copy<'_>,
    ) -> Result<(), anyhow::Error> {
        let mut headers = original.headers.clone().unwrap_or_default();
        headers.insert(DEAD_CONSUMER, copy.consumer);
        headers.insert(DEAD_REASON, header_text(copy.reason).as_str());
        headers.insert(DEAD_SEQUENCE, copy.stream_sequence.to_string().as_str());
        headers.insert(DEAD_DELIVERED, copy.delivered.to_string().as_str());
        let id = format!(
            "{}:dead:{}",
            copy.message_id
                .map_or_else(|| format!("seq:{}", copy.stream_sequence), str::to_owned),
            copy.consumer
        );
        let message = PublishMessage::build()
            .payload(original.payload.clone())
            .headers(headers)
            .message_id(id);
        self.jetstream
            .send_publish(self.subject.clone(), message)
            .await?
            .await?;
        Ok(())
    }
}

/// What a dead letter says about the message it copies.
#[derive(Debug)]
pub(crate) struct Copy<'a> {
    pub(crate) consumer: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) message_id: Option<&'a str>,
    pub(crate) stream_sequence: u64,
    pub(crate) delivered: i64,
}

/// `text` on one line of printable characters, at most [`MAX_REASON`] bytes,
/// cut on a character boundary.
fn header_text(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > MAX_REASON {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::header_text;

    #[test]
    fn reasons_are_one_bounded_line() {
        assert_eq!(header_text("bad\r\npayload"), "bad  payload");
        let long = header_text(&"é".repeat(1000));
        assert!(long.len() <= 1024 && long.len() >= 1022);
    }
}
