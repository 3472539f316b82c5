//! The WebSocket channel protocol of `exec` and `attach` (upstream
//! `k8s.io/apimachinery/pkg/util/remotecommand` constants and the `wsstream` package; KEP-4006
//! for `v5.channel.k8s.io`).
//!
//! Every binary message starts with one channel byte: 0 stdin, 1 stdout, 2 stderr, 3 error,
//! 4 resize; the rest of the message is that channel's data. `v5.channel.k8s.io` adds 255: a
//! message `[255, c]` closes channel `c` (a client ends stdin this way). The error channel
//! carries the outcome once, at the end: a JSON `metav1.Status` for `v4`/`v5`, the plain error
//! text (nothing on success) for older protocols. The resize channel carries JSON
//! `{"Width": w, "Height": h}` objects (upstream `TerminalSize`), one or more per message.

use serde::Deserialize;
use serde_json::json;

/// Channel of the process's standard input (client → server).
pub const STDIN: u8 = 0;
/// Channel of standard output (server → client).
pub const STDOUT: u8 = 1;
/// Channel of standard error (server → client).
pub const STDERR: u8 = 2;
/// Channel of the final `Status` (server → client).
pub const ERROR: u8 = 3;
/// Channel of terminal size changes (client → server).
pub const RESIZE: u8 = 4;
/// `v5.channel.k8s.io`: `[255, c]` closes channel `c`.
pub const CLOSE: u8 = 255;

/// Upstream's reason for a command that exited with a non-zero code.
pub const NON_ZERO_EXIT_CODE_REASON: &str = "NonZeroExitCode";
/// Upstream's cause type carrying the exit code as its message.
pub const EXIT_CODE_CAUSE_TYPE: &str = "ExitCode";

/// A channel sub-protocol of the WebSocket handshake (`Sec-WebSocket-Protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `v5.channel.k8s.io`: v4 plus the close message.
    V5,
    /// `v4.channel.k8s.io`: the error channel carries a JSON `Status`.
    V4,
    /// `v3.channel.k8s.io`: adds the resize channel.
    V3,
    /// `v2.channel.k8s.io`.
    V2,
    /// `channel.k8s.io` (also what a client offering no protocol gets).
    V1,
}

impl Protocol {
    /// Every protocol served.
    pub const ALL: [Protocol; 5] = [Protocol::V5, Protocol::V4, Protocol::V3, Protocol::V2, Protocol::V1];

    /// The `Sec-WebSocket-Protocol` token.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::V5 => "v5.channel.k8s.io",
            Protocol::V4 => "v4.channel.k8s.io",
            Protocol::V3 => "v3.channel.k8s.io",
            Protocol::V2 => "v2.channel.k8s.io",
            Protocol::V1 => "channel.k8s.io",
        }
    }

    /// The protocol named `name`, if served.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name.trim())
    }

    /// The first protocol of the client's offer (the values of its `Sec-WebSocket-Protocol`
    /// headers, each a comma-separated list) that is served; `Ok(None)` when the client offered
    /// none (upstream then speaks `channel.k8s.io` without naming it); `Err` with the offer when
    /// nothing offered is served.
    ///
    /// # Errors
    /// See above.
    pub fn negotiate<'a>(offers: impl IntoIterator<Item = &'a str>) -> Result<Option<Self>, String> {
        let offered: Vec<&str> =
            offers.into_iter().flat_map(|v| v.split(',')).map(str::trim).filter(|s| !s.is_empty()).collect();
        if offered.is_empty() {
            return Ok(None);
        }
        offered.iter().find_map(|o| Self::from_name(o)).map(Some).ok_or_else(|| offered.join(", "))
    }

    /// Whether the error channel carries a JSON `Status` (v4 and later).
    pub fn status_json(self) -> bool {
        matches!(self, Protocol::V5 | Protocol::V4)
    }

    /// Whether the client may close single channels (v5).
    pub fn can_close(self) -> bool {
        self == Protocol::V5
    }
}

/// One message from the client, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// Bytes for the process's standard input.
    Stdin(Vec<u8>),
    /// Terminal sizes, in the order sent.
    Resize(Vec<TerminalSize>),
    /// The client closed this channel (v5).
    Close(u8),
    /// An empty message, a message on a channel a client does not write, or a close message
    /// under a protocol without one: ignored.
    Ignored,
}

/// A terminal size (upstream `remotecommand.TerminalSize`): columns and rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct TerminalSize {
    /// Columns.
    #[serde(rename = "Width")]
    pub width: u16,
    /// Rows.
    #[serde(rename = "Height")]
    pub height: u16,
}

/// Decodes one binary message from the client under `protocol`.
pub fn decode(protocol: Option<Protocol>, msg: &[u8]) -> Incoming {
    let Some((&channel, data)) = msg.split_first() else { return Incoming::Ignored };
    match channel {
        STDIN => Incoming::Stdin(data.to_vec()),
        RESIZE => Incoming::Resize(parse_resize(data)),
        CLOSE if protocol.is_some_and(Protocol::can_close) => match data.first() {
            Some(&c) => Incoming::Close(c),
            None => Incoming::Ignored,
        },
        _ => Incoming::Ignored,
    }
}

/// The terminal sizes of a resize message: consecutive JSON objects; decoding stops at the
/// first value that is not a `TerminalSize`.
pub fn parse_resize(data: &[u8]) -> Vec<TerminalSize> {
    serde_json::Deserializer::from_slice(data).into_iter::<TerminalSize>().map_while(Result::ok).collect()
}

/// One message to the client: `channel` then `data`.
pub fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(channel);
    out.extend_from_slice(data);
    out
}

/// How a command ended, for the error channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit code 0.
    Success,
    /// A non-zero exit code of `command`.
    Exited {
        /// The command as run (rendered like Go's `%v` of a string slice).
        command: Vec<String>,
        /// The exit code (128 + signal for a signalled process).
        code: i32,
    },
    /// The command could not be run (or the stream failed): an internal error.
    Failed(String),
}

/// The `metav1.Status` upstream's kubelet writes for an outcome (`ServeExec`/`ServeAttach`):
/// `Success`; `Failure` with `reason: NonZeroExitCode`, a cause `ExitCode` whose message is the
/// code and message `command terminated with non-zero exit code: error executing command [..],
/// exit code N`; or an `InternalError` (code 500) for a command that could not be run.
pub fn status(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Success => json!({"metadata": {}, "status": "Success"}),
        Outcome::Exited { command, code } => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                command.join(" ")
            ),
            "reason": NON_ZERO_EXIT_CODE_REASON,
            "details": {"causes": [{"reason": EXIT_CODE_CAUSE_TYPE, "message": code.to_string()}]},
        }),
        Outcome::Failed(err) => {
            let cause = format!("error executing command in container: {err}");
            json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("Internal error occurred: {cause}"),
                "reason": "InternalError",
                "details": {"causes": [{"message": cause}]},
                "code": 500,
            })
        }
    }
}

/// The payload of the error channel for `outcome` under `protocol`: the JSON `Status` (v4, v5),
/// or the status message for a failure under older protocols (`None`: nothing to send).
pub fn error_payload(protocol: Option<Protocol>, outcome: &Outcome) -> Option<Vec<u8>> {
    let s = status(outcome);
    if protocol.is_some_and(Protocol::status_json) {
        return serde_json::to_vec(&s).ok();
    }
    s["message"].as_str().map(|m| m.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_takes_the_first_offered_protocol_that_is_served() {
        let offer = ["v5.channel.k8s.io, v4.channel.k8s.io", "v3.channel.k8s.io"];
        assert_eq!(Protocol::negotiate(offer), Ok(Some(Protocol::V5)));
        assert_eq!(Protocol::negotiate(["base64.channel.k8s.io,v4.channel.k8s.io"]), Ok(Some(Protocol::V4)));
        assert_eq!(Protocol::negotiate(["channel.k8s.io"]), Ok(Some(Protocol::V1)));
        assert_eq!(Protocol::negotiate(Vec::<&str>::new()), Ok(None));
        assert_eq!(Protocol::negotiate(["SPDY/3.1+portforward.k8s.io"]), Err("SPDY/3.1+portforward.k8s.io".to_string()));
    }

    #[test]
    fn messages_are_a_channel_byte_then_data() {
        assert_eq!(frame(STDOUT, b"hi\n"), b"\x01hi\n");
        assert_eq!(frame(ERROR, b""), vec![3]);
        assert_eq!(decode(Some(Protocol::V5), b"\x00abc"), Incoming::Stdin(b"abc".to_vec()));
        assert_eq!(decode(Some(Protocol::V4), b"\x00"), Incoming::Stdin(vec![]));
        assert_eq!(decode(Some(Protocol::V5), &[255, 0]), Incoming::Close(0));
        assert_eq!(decode(Some(Protocol::V4), &[255, 0]), Incoming::Ignored, "v4 has no close message");
        assert_eq!(decode(Some(Protocol::V5), &[255]), Incoming::Ignored);
        assert_eq!(decode(Some(Protocol::V5), b""), Incoming::Ignored);
        assert_eq!(decode(Some(Protocol::V5), b"\x01out"), Incoming::Ignored, "clients do not write stdout");
    }

    #[test]
    fn resize_messages_hold_one_or_more_terminal_sizes() {
        let one = decode(Some(Protocol::V5), b"\x04{\"Width\":80,\"Height\":24}");
        assert_eq!(one, Incoming::Resize(vec![TerminalSize { width: 80, height: 24 }]));
        let two = parse_resize(b"{\"Width\":100,\"Height\":30}{\"Width\":120,\"Height\":40}");
        assert_eq!(two, vec![TerminalSize { width: 100, height: 30 }, TerminalSize { width: 120, height: 40 }]);
        assert_eq!(parse_resize(b"{\"Width\":1,\"Height\":2} junk"), vec![TerminalSize { width: 1, height: 2 }]);
        assert!(parse_resize(b"{\"Width\":-1,\"Height\":2}").is_empty(), "sizes are unsigned");
        assert!(parse_resize(b"not json").is_empty());
    }

    #[test]
    fn exit_codes_become_upstream_statuses_on_the_error_channel() {
        let ok = error_payload(Some(Protocol::V5), &Outcome::Success).expect("v5 sends success");
        assert_eq!(String::from_utf8(ok).expect("utf8"), r#"{"metadata":{},"status":"Success"}"#);
        let exited = Outcome::Exited { command: vec!["sh".into(), "-c".into(), "exit 3".into()], code: 3 };
        let s = status(&exited);
        assert_eq!(s["status"], "Failure");
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"], json!([{"reason": "ExitCode", "message": "3"}]));
        assert_eq!(s["message"], "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3");
        let failed = status(&Outcome::Failed("exec \"nope\": No such file or directory".into()));
        assert_eq!((failed["reason"].as_str(), failed["code"].as_i64()), (Some("InternalError"), Some(500)));
        // Before v4 the error channel is the message alone, and nothing on success.
        assert_eq!(error_payload(Some(Protocol::V3), &Outcome::Success), None);
        let text = error_payload(Some(Protocol::V2), &exited).expect("failure text");
        assert!(text.starts_with(b"command terminated with non-zero exit code"));
        assert_eq!(error_payload(None, &Outcome::Success), None);
    }
}
