//! A live SPDY server session (`Connection`, as the streaming server runs
//! it) fed the input as the client's bytes: it must neither panic nor hang,
//! and ends once the input has.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use berth_streaming::spdy::{Accept, Connection};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let accept: Accept = Box::new(|h| match h.get("streamtype") {
            Some("stdin" | "stdout" | "error") => Ok(()),
            _ => Err("no".into()),
        });
        let Some(mut conn) = Connection::serve(server, accept) else {
            return;
        };
        let closed = conn.closed();
        let session = async {
            tokio::pin!(closed);
            loop {
                tokio::select! {
                    stream = conn.accept() => match stream {
                        // Answered once, then dropped (what it is sent
                        // next is dropped by the session).
                        Some(mut s) => {
                            let _ = s.rx.try_recv();
                            let _ = s.tx.write(b"x").await;
                        }
                        None => break,
                    },
                    _ = &mut closed => break,
                }
            }
        };
        let (mut read, mut write) = tokio::io::split(&mut client);
        let peer = async {
            let _ = write.write_all(data).await;
            let _ = write.shutdown().await;
        };
        let drain = async {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n) = read.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        };
        let all = async {
            tokio::join!(session, peer);
        };
        // A session that neither ends nor hangs up within the bound hangs.
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::select! {
                _ = all => {}
                _ = drain => {}
            }
        })
        .await;
        assert!(ended.is_ok(), "the session did not end after the input did");
    });
});
