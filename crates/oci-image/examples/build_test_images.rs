//! Builds berth's test images and pushes them to a local registry:
//! `build_test_images ADDR [--auth USER:PASS]`. Prints `ADDR/repo:tag@digest`
//! for each name. Run through `hack/build-test-images.sh`.

#[path = "../tests/support/images.rs"]
mod images;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    // This crate's reqwest has no TLS provider of its own.
    berth_oci_image::install_crypto_provider();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, auth) = match args.as_slice() {
        [addr] => (addr.clone(), None),
        [addr, flag, creds] if flag == "--auth" => match creds.split_once(':') {
            Some((u, p)) => (addr.clone(), Some((u.to_string(), p.to_string()))),
            None => {
                eprintln!("build_test_images: --auth wants USER:PASS");
                return std::process::ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: build_test_images ADDR [--auth USER:PASS]");
            return std::process::ExitCode::from(2);
        }
    };
    let auth_ref = auth.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
    match images::build_and_push(&addr, auth_ref).await {
        Ok(pushed) => {
            for (name, digest) in pushed {
                println!("{addr}/{name}@{digest}");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("build_test_images: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
