//! CRI `Exec`, `ExecSync` and `Attach` of `rkube runtime` over its real unix socket, and the streaming
//! server its `Exec` URLs point at, driven by a real WebSocket client speaking
//! `v5.channel.k8s.io` / `v4.channel.k8s.io` as kubectl and the Python client do.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rkube_runtime::cri;
use rkube_runtime::cri::runtime_service_client::RuntimeServiceClient;
use rkube_runtime::{endpoint, serve, RuntimeConfig, RuntimeHandle};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tonic::transport::Channel;

const LIMIT: Duration = Duration::from_secs(20);

struct Fixture {
    _dir: tempfile::TempDir,
    handle: RuntimeHandle,
    rt: RuntimeServiceClient<Channel>,
    sandbox: String,
    container: String,
}

/// A runtime with one running container (`sleep 3600`, env `GREETING=hello`, workdir `/tmp`).
async fn start() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let handle = serve(&dir.path().join("cri.sock"), RuntimeConfig::new(dir.path().join("root"))).await.expect("serve");
    let mut rt = RuntimeServiceClient::new(endpoint::connect(&handle.endpoint()).await.expect("connect"));
    let config = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata { name: "p".into(), uid: "u".into(), namespace: "default".into(), attempt: 0 }),
        ..Default::default()
    };
    let sandbox = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: "c".into(), attempt: 0 }),
        command: vec!["sleep".into(), "3600".into()],
        envs: vec![cri::KeyValue { key: "GREETING".into(), value: "hello".into() }],
        working_dir: "/tmp".into(),
        ..Default::default()
    };
    let req = cri::CreateContainerRequest { pod_sandbox_id: sandbox.clone(), config: Some(config), sandbox_config: None };
    let container = rt.create_container(req).await.expect("CreateContainer").into_inner().container_id;
    rt.start_container(cri::StartContainerRequest { container_id: container.clone() }).await.expect("StartContainer");
    Fixture { _dir: dir, handle, rt, sandbox, container }
}

/// What a client saw of one exec: stdout, stderr, the error channel and the protocol agreed.
#[derive(Debug, Default)]
struct Seen {
    stdout: String,
    stderr: String,
    error: Option<serde_json::Value>,
    protocol: Option<String>,
}

impl Fixture {
    async fn exec_url(&mut self, cmd: &[&str], stdin: bool, tty: bool) -> String {
        let req = cri::ExecRequest {
            container_id: self.container.clone(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty,
            stdin,
            stdout: true,
            stderr: !tty,
        };
        self.rt.exec(req).await.expect("Exec").into_inner().url
    }
}

impl Fixture {
    /// Starts another container running `script` under `sh -c`, with `stdin` / `stdin_once`.
    async fn started(&mut self, name: &str, script: &str, stdin: bool, stdin_once: bool) -> String {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            command: vec!["sh".into(), "-c".into(), script.into()],
            stdin,
            stdin_once,
            ..Default::default()
        };
        let req = cri::CreateContainerRequest { pod_sandbox_id: self.sandbox.clone(), config: Some(config), sandbox_config: None };
        let id = self.rt.create_container(req).await.expect("CreateContainer").into_inner().container_id;
        self.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
        id
    }
}

/// Connects to `url` offering `protocols`, sends `input` (channel-framed messages), then reads
/// until the server closes.
async fn session(url: &str, protocols: &str, input: Vec<Vec<u8>>) -> Seen {
    let mut req = url.replace("http://", "ws://").into_client_request().expect("request");
    req.headers_mut().insert("sec-websocket-protocol", protocols.parse().expect("header"));
    let (ws, resp) = tokio_tungstenite::connect_async(req).await.expect("WebSocket handshake");
    let mut seen = Seen {
        protocol: resp.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()).map(str::to_string),
        ..Default::default()
    };
    let (mut sink, mut source) = ws.split();
    for msg in input {
        sink.send(Message::Binary(msg.into())).await.expect("send");
    }
    let read = async {
        while let Some(msg) = source.next().await {
            let data = match msg {
                Ok(Message::Binary(b)) => b.to_vec(),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            let Some((&channel, rest)) = data.split_first() else { continue };
            let text = String::from_utf8_lossy(rest).into_owned();
            match channel {
                1 => seen.stdout.push_str(&text),
                2 => seen.stderr.push_str(&text),
                3 if !rest.is_empty() => seen.error = Some(serde_json::from_slice(rest).expect("Status JSON")),
                _ => {}
            }
        }
    };
    tokio::time::timeout(LIMIT, read).await.expect("the server ends the session");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_streams_output_and_reports_the_exit_code_as_an_upstream_status() {
    let mut f = start().await;
    let url = f.exec_url(&["sh", "-c", "echo $GREETING from $(pwd); echo oops >&2; exit 3"], false, false).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let seen = session(&url, "v5.channel.k8s.io,v4.channel.k8s.io", vec![]).await;
    assert_eq!(seen.protocol.as_deref(), Some("v5.channel.k8s.io"));
    assert_eq!((seen.stdout.as_str(), seen.stderr.as_str()), ("hello from /tmp\n", "oops\n"));
    let status = seen.error.expect("status on the error channel");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0], serde_json::json!({"reason": "ExitCode", "message": "3"}));

    // A URL is good once.
    let again = tokio_tungstenite::connect_async(url.replace("http://", "ws://")).await;
    assert!(again.is_err(), "a used token is refused");

    let url = f.exec_url(&["true"], false, false).await;
    let seen = session(&url, "v4.channel.k8s.io", vec![]).await;
    assert_eq!(seen.protocol.as_deref(), Some("v4.channel.k8s.io"));
    assert_eq!(seen.error, Some(serde_json::json!({"metadata": {}, "status": "Success"})));
    f.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_stdin_ends_with_the_v5_close_message() {
    let mut f = start().await;
    let url = f.exec_url(&["sh", "-c", "tr a-z A-Z; echo done"], true, false).await;
    let seen = session(&url, "v5.channel.k8s.io", vec![b"\x00abc\n".to_vec(), b"\x00def\n".to_vec(), vec![255, 0]]).await;
    assert_eq!(seen.stdout, "ABC\nDEF\ndone\n");
    assert_eq!(seen.error.expect("status")["status"], "Success");
    f.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_with_a_tty_applies_resize_messages() {
    let mut f = start().await;
    let url = f.exec_url(&["sh", "-c", "read line; stty size; echo \"got $line\""], true, true).await;
    let input = vec![b"\x04{\"Width\":123,\"Height\":45}".to_vec(), b"\x00hi\n".to_vec()];
    let seen = session(&url, "v5.channel.k8s.io", input).await;
    // The terminal echoes input and turns "\n" into "\r\n".
    assert!(seen.stdout.contains("45 123\r\n"), "{:?}", seen.stdout);
    assert!(seen.stdout.contains("got hi\r\n"), "{:?}", seen.stdout);
    assert_eq!(seen.stderr, "", "a terminal has no separate stderr");
    assert_eq!(seen.error.expect("status")["status"], "Success");
    f.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_sync_runs_to_the_end_and_exec_needs_a_running_container() {
    let mut f = start().await;
    let req = cri::ExecSyncRequest {
        container_id: f.container.clone(),
        cmd: vec!["sh".into(), "-c".into(), "echo out; echo err >&2; exit 7".into()],
        timeout: 10,
    };
    let out = f.rt.exec_sync(req).await.expect("ExecSync").into_inner();
    assert_eq!((out.stdout.as_slice(), out.stderr.as_slice(), out.exit_code), (&b"out\n"[..], &b"err\n"[..], 7));

    let bad = f.rt.exec(cri::ExecRequest { container_id: "nope".into(), cmd: vec!["true".into()], stdout: true, ..Default::default() }).await;
    assert_eq!(bad.expect_err("unknown container").code(), tonic::Code::NotFound);
    f.rt.stop_container(cri::StopContainerRequest { container_id: f.container.clone(), timeout: 0 }).await.expect("StopContainer");
    let stopped = f.rt.exec(cri::ExecRequest { container_id: f.container.clone(), cmd: vec!["true".into()], stdout: true, ..Default::default() }).await;
    let status = stopped.expect_err("stopped container");
    assert_eq!((status.code(), status.message()), (tonic::Code::FailedPrecondition, "failed precondition: container is in CONTAINER_EXITED state"));
    f.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_writes_the_containers_stdin_and_stdin_once_closes_it_on_detach() {
    let mut f = start().await;
    let id = f.started("reader", "while read l; do echo \"got $l\"; done; echo bye >&2", true, true).await;
    let req = cri::AttachRequest { container_id: id.clone(), stdin: true, tty: false, stdout: true, stderr: true };
    let url = f.rt.attach(req).await.expect("Attach").into_inner().url;
    assert!(url.contains("/attach/"), "{url}");
    // Closing stdin (v5) ends the container's read loop; the session ends with its exit.
    let seen = session(&url, "v5.channel.k8s.io", vec![b"\x00hello\n".to_vec(), vec![255, 0]]).await;
    assert_eq!((seen.stdout.as_str(), seen.stderr.as_str()), ("got hello\n", "bye\n"));
    assert_eq!(seen.error.expect("status")["status"], "Success");

    // A container without `stdin: true` can still be attached for its output.
    let id = f.started("talker", "sleep 1; echo one; echo two", false, false).await;
    let req = cri::AttachRequest { container_id: id, stdin: false, tty: false, stdout: true, stderr: true };
    let url = f.rt.attach(req).await.expect("Attach").into_inner().url;
    let seen = session(&url, "v4.channel.k8s.io", vec![]).await;
    assert_eq!(seen.stdout, "one\ntwo\n");
    f.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_announces_each_port_and_copies_a_tcp_connection() {
    let mut f = start().await;
    // A one-shot server on loopback that answers what it read, upper-cased.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut conn, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf).await.expect("read");
        conn.write_all(&buf.to_ascii_uppercase()).await.expect("write");
    });
    let req = cri::PortForwardRequest { pod_sandbox_id: f.sandbox.clone(), port: vec![i32::from(port)] };
    let url = f.rt.port_forward(req).await.expect("PortForward").into_inner().url;
    let mut req = url.replace("http://", "ws://").into_client_request().expect("request");
    req.headers_mut().insert("sec-websocket-protocol", "v4.channel.k8s.io".parse().expect("header"));
    let (ws, _) = tokio_tungstenite::connect_async(req).await.expect("handshake");
    let (mut sink, mut source) = ws.split();
    sink.send(Message::Binary(b"\x00hello".to_vec().into())).await.expect("send");
    let mut frames = Vec::new();
    let read = async {
        while let Some(Ok(Message::Binary(b))) = source.next().await {
            frames.push(b.to_vec());
        }
    };
    tokio::time::timeout(LIMIT, read).await.expect("closed when the connection ends");
    let [lo, hi] = port.to_le_bytes();
    assert_eq!(frames[0], vec![0, lo, hi], "data channel announces the port");
    assert_eq!(frames[1], vec![1, lo, hi], "error channel announces the port");
    let data: Vec<u8> = frames[2..].iter().filter(|f| f[0] == 0).flat_map(|f| f[1..].to_vec()).collect();
    assert_eq!(data, b"HELLO");
    server.await.expect("server");

    // Nothing listens on the port any more: the error channel says so.
    let req = cri::PortForwardRequest { pod_sandbox_id: f.sandbox.clone(), port: vec![i32::from(port)] };
    let url = f.rt.port_forward(req).await.expect("PortForward").into_inner().url;
    let (mut ws, _) = tokio_tungstenite::connect_async(url.replace("http://", "ws://")).await.expect("handshake");
    let mut errors = String::new();
    while let Some(Ok(Message::Binary(b))) = ws.next().await {
        if b[0] == 1 && b.len() > 3 {
            errors.push_str(&String::from_utf8_lossy(&b[1..]));
        }
    }
    assert!(errors.contains(&format!("failed to connect to localhost:{port}")), "{errors}");
    f.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_hangs_up_its_terminal() {
    let mut f = start().await;
    let marker = f._dir.path().join("hung-up");
    let script = format!("trap 'echo hup > {}; exit 129' HUP; echo ready; while true; do sleep 0.1; done", marker.display());
    let url = f.exec_url(&["sh", "-c", &script], true, true).await;
    let mut req = url.replace("http://", "ws://").into_client_request().expect("request");
    req.headers_mut().insert("sec-websocket-protocol", "v5.channel.k8s.io".parse().expect("header"));
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.expect("handshake");
    let until_ready = async {
        while let Some(Ok(msg)) = ws.next().await {
            if msg.into_data().windows(5).any(|w| w == b"ready") {
                return;
            }
        }
    };
    tokio::time::timeout(LIMIT, until_ready).await.expect("the command started");
    drop(ws);
    let deadline = std::time::Instant::now() + LIMIT;
    while !marker.exists() {
        assert!(std::time::Instant::now() < deadline, "the shell never got SIGHUP");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f.handle.shutdown().await;
}
