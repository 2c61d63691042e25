//! `berth images pull|import|export`: the client of the daemon's admin
//! service (`server/admin.rs`) on its socket.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use cri_api::admin::images_client::ImagesClient;
use cri_api::admin::{pull_progress, ExportRequest, ImportRequest, PullRequest};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::cli::{Flags, ImagesAction};
use crate::pull_render::{Bars, Lines, Render};

/// Runs one `berth images` command against the configured socket.
pub fn run(flags: &Flags, action: ImagesAction) -> anyhow::Result<()> {
    let socket = match &flags.socket {
        Some(s) => s.clone(),
        None => flags.load()?.config.socket,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        let channel = connect(&socket)
            .await
            .with_context(|| format!("connecting to berth at {}", socket.display()))?;
        let mut client = ImagesClient::new(channel)
            .max_decoding_message_size(crate::server::grpc::MAX_MESSAGE_SIZE);
        match action {
            ImagesAction::Pull { creds, image } => pull(&mut client, image, creds).await,
            ImagesAction::Import { files } => import(&mut client, &files).await,
            ImagesAction::Export {
                output,
                all_tags,
                images,
            } => export(&mut client, &output, images, all_tags).await,
        }
    })
}

async fn connect(socket: &Path) -> anyhow::Result<Channel> {
    let socket = socket.to_path_buf();
    Ok(Endpoint::try_from("http://localhost")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await?)
}

/// Pulls `image` through the daemon, showing its progress on stdout.
async fn pull(
    client: &mut ImagesClient<Channel>,
    image: String,
    creds: Option<String>,
) -> anyhow::Result<()> {
    let (username, password) = match creds {
        None => (String::new(), String::new()),
        Some(c) => match c.split_once(':') {
            Some((u, p)) => (u.to_string(), p.to_string()),
            None => bail!("--creds must be USER:PASSWORD"),
        },
    };
    let mut stream = client
        .pull(PullRequest {
            image: image.clone(),
            username,
            password,
            ..PullRequest::default()
        })
        .await
        .map_err(|s| anyhow::anyhow!("pulling {image}: {}", s.message()))?
        .into_inner();
    let mut render = if std::io::stdout().is_terminal() {
        Render::Bars(Bars::new(indicatif::ProgressDrawTarget::stdout()))
    } else {
        Render::Lines(Lines::default())
    };
    let mut stdout = std::io::stdout();
    let mut pulled = false;
    loop {
        match stream.message().await {
            Ok(Some(msg)) => {
                pulled |= matches!(msg.event, Some(pull_progress::Event::Pulled(_)));
                for line in render.feed(&msg) {
                    writeln!(stdout, "{line}")?;
                }
                stdout.flush()?;
            }
            Ok(None) => break,
            Err(s) => bail!("pulling {image}: {}", s.message()),
        }
    }
    if !pulled {
        bail!("pulling {image}: the daemon's answer ended before the pull did");
    }
    Ok(())
}

/// Imports each file in turn; stops at the first that fails.
async fn import(client: &mut ImagesClient<Channel>, files: &[PathBuf]) -> anyhow::Result<()> {
    for file in files {
        let path = std::path::absolute(file)
            .with_context(|| format!("making {} absolute", file.display()))?;
        let answer = client
            .import(ImportRequest {
                path: path.display().to_string(),
            })
            .await
            .map_err(|s| anyhow::anyhow!("{}: {}", file.display(), s.message()))?
            .into_inner();
        for image in answer.images {
            let names = if image.repo_tags.is_empty() {
                "(no name)".to_string()
            } else {
                image.repo_tags.join(" ")
            };
            println!("imported {} {names}", image.id);
        }
    }
    Ok(())
}

/// Writes the stream to a temp file beside `output`, renamed into place
/// once whole.
async fn export(
    client: &mut ImagesClient<Channel>,
    output: &Path,
    images: Vec<String>,
    all_tags: bool,
) -> anyhow::Result<()> {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut stream = client
        .export(ExportRequest { images, all_tags })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    let mut tmp = tempfile::Builder::new()
        .prefix(".berth-export-")
        .tempfile_in(&dir)
        .with_context(|| format!("creating a temp file in {}", dir.display()))?;
    let mut total = 0u64;
    loop {
        match stream.message().await {
            Ok(Some(chunk)) => {
                total += chunk.data.len() as u64;
                tmp.write_all(&chunk.data)
                    .with_context(|| format!("writing {}", tmp.path().display()))?;
            }
            Ok(None) => break,
            Err(s) => bail!("export failed: {}", s.message()),
        }
    }
    if total == 0 {
        bail!("export failed: the daemon sent nothing");
    }
    tmp.as_file().sync_all()?;
    tmp.persist(output)
        .with_context(|| format!("writing {}", output.display()))?;
    println!("exported {} ({total} bytes)", output.display());
    Ok(())
}
