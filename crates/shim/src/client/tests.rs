//! Tests of the shim client: its frame reading and the ids it makes.

use super::*;

#[tokio::test]
async fn async_frames_match_blocking_ones() {
    let mut buf = Vec::new();
    protocol::write_json(&mut buf, &Response::Started { pid: 3 }).unwrap();
    let mut r = &buf[..];
    let (kind, payload) = read_frame(&mut r).await.unwrap().unwrap();
    assert_eq!(
        decode_response("c", kind, &payload).unwrap(),
        Response::Started { pid: 3 }
    );
    let mut out = Vec::new();
    write_frame(&mut out, FrameKind::Stdin, b"abc")
        .await
        .unwrap();
    let mut r = &out[..];
    assert_eq!(
        protocol::read_frame(&mut r).unwrap(),
        Some((FrameKind::Stdin, b"abc".to_vec()))
    );
}

#[tokio::test]
async fn remote_errors_are_typed() {
    let err = protocol::RemoteError {
        kind: protocol::ErrorKind::Runtime,
        message: "runc start c: exit status 1".into(),
        exit_status: Some(1),
        stderr: Some("container \"c\" does not exist".into()),
    };
    let payload = serde_json::to_vec(&Response::Error(err)).unwrap();
    let e = decode_response("c", FrameKind::Json, &payload).unwrap_err();
    assert_eq!(e.runtime_exit_status(), Some(1));
    assert!(e.is_not_found());
    assert!(e.to_string().contains("exit status 1"));
}

#[tokio::test]
async fn connect_to_nothing_is_shim_gone() {
    let dir = tempfile::tempdir().unwrap();
    let err = ShimClient::connect(dir.path().join("none.sock"))
        .await
        .unwrap_err();
    assert!(err.is_shim_gone(), "{err}");
}

#[test]
fn exec_ids_are_valid_and_unique() {
    let (a, b) = (new_exec_id("sync"), new_exec_id("sync"));
    assert_ne!(a, b);
    assert!(crate::options::valid_exec_id(&a), "{a}");
}
