//! `herald demo`: the whole product on one machine. A simulated Internet (DNS server and SMTP
//! receivers on their own 127.x addresses, a few huge providers and a long tail, a few hosts
//! that throttle or reject unknown users), a real Herald server configured to use it, a list
//! created and filled over the HTTP API, one post, a progress bar, and a summary cross-checked
//! against what the receivers recorded.

use crate::client::Api;
use crate::{csv_import, post_cmd};
use anyhow::{bail, Context, Result};
use clap::Args;
use herald_api_types::{Injected, ListInfo, PostSummary};
use herald_server::{config::ListenConfig, Config, Listeners};
use herald_sim::{GenSpec, ProfileFractions, ReceiverSettings, World, WorldConfig};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Args)]
pub struct DemoArgs {
    /// Members of the demo list.
    #[arg(long, default_value_t = 10_000)]
    members: usize,
    /// Simulated domains (Zipf-distributed sizes).
    #[arg(long, default_value_t = 300)]
    domains: usize,
    /// Size of the post's body in KB.
    #[arg(long, default_value_t = 10)]
    size_kb: usize,
    /// Seed of the simulated world.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the demo server keeps its data (wiped at start; kept afterwards for a look at the
    /// delivery log).
    #[arg(long, default_value = "./herald-data/demo")]
    data_dir: PathBuf,
    /// Sign every copy with a fresh DKIM key of this algorithm (rsa or ed25519).
    #[arg(long)]
    dkim: Option<String>,
    /// With --dkim: sign only, without the ARC set (two more signatures per copy).
    #[arg(long, requires = "dkim")]
    no_arc: bool,
    /// After the fan-out, keep the server (and its dashboard) running until Ctrl-C or
    /// `--serve-secs` pass.
    #[arg(long)]
    serve: bool,
    /// With --serve: stop after this many seconds (0: until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    serve_secs: u64,
    /// With --serve: post again every this many seconds (0: never), so the dashboard moves.
    #[arg(long, default_value_t = 0)]
    repost_secs: u64,
    /// Admin token for the dashboard and API (at least 16 characters; default: none, loopback
    /// clients only).
    #[arg(long, env = "HERALD_DEMO_TOKEN")]
    admin_token: Option<String>,
    /// Turn the statistics store off (to measure what it costs).
    #[arg(long)]
    no_stats: bool,
    /// Every simulated host accepts everything at once (no throttling, unknown users or
    /// STARTTLS): a clean world for throughput benchmarks.
    #[arg(long)]
    plain: bool,
    /// With --serve: write the mail the simulated Internet receives for this address (e.g. a
    /// confirmation after subscribing on the public form) to `<data-dir>/mailbox/<address>/`,
    /// one `.eml` file per message, so the demo can be tried as a subscriber. Repeatable.
    #[arg(long, value_name = "ADDRESS")]
    mailbox: Vec<String>,
}

const LIST: &str = "demo@lists.herald.test";

pub async fn run(args: DemoArgs) -> Result<()> {
    if args.members == 0 || args.domains == 0 {
        bail!("--members and --domains must be at least 1");
    }
    let world_cfg =
        WorldConfig::generate(&world_spec(&args)).context("generating the simulated world")?;
    let addresses = world_cfg.member_addresses(args.members);
    let world = World::start(world_cfg)
        .await
        .context("starting the simulated world")?;
    outln!(
        "simulated Internet: {} domains, DNS on {}, receivers on 127.x addresses port {}",
        args.domains,
        world.dns_addr(),
        world.smtp_port()
    );

    if args.data_dir.exists() {
        std::fs::remove_dir_all(&args.data_dir)
            .with_context(|| format!("wiping {}", args.data_dir.display()))?;
    }
    let listeners = Listeners::bind_ephemeral().await?;
    let (smtp, lmtp, http) = listeners.addrs()?;
    let listen = ListenConfig {
        smtp,
        lmtp,
        http,
        submissions: None,
    };
    let config = server_config(&args, listen, &world)?;
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(herald_server::run(config, listeners, shutdown.clone()));
    outln!(
        "herald: SMTP {smtp}, LMTP {lmtp}, HTTP {http}, data in {}",
        args.data_dir.display()
    );

    let api = Api::with_base(format!("http://{http}"))?.with_token(args.admin_token.clone());
    wait_until_up(&api).await?;
    let result = fan_out(&api, &addresses, args.size_kb).await;
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            shutdown.cancel();
            let _ = server.await;
            world.shutdown().await;
            return Err(e);
        }
    };
    print_results(&summary, &world);
    if args.serve {
        serve_on(&api, &args, &world).await;
    }
    shutdown.cancel();
    server.await.context("server task")??;
    world.shutdown().await;
    outln!(
        "delivery log: {}",
        args.data_dir.join("log").join("delivery.log").display()
    );
    Ok(())
}

/// The simulated Internet the demo posts to: some hosts slow, throttling or refusing unless
/// `--plain`.
fn world_spec(args: &DemoArgs) -> GenSpec {
    GenSpec {
        domains: args.domains,
        seed: args.seed,
        fractions: if args.plain {
            ProfileFractions {
                hung: 0.0,
                refused: 0.0,
                greylist: 0.0,
                slow: 0.0,
                unknown_users: 0.0,
                throttle: 0.0,
                drop_mid_data: 0.0,
                starttls: 0.0,
                ..ProfileFractions::default()
            }
        } else {
            ProfileFractions {
                unknown_users: 0.01,
                throttle: 0.05,
                starttls: 0.3,
                ..ProfileFractions::default()
            }
        },
        unknown_users_rate: 0.2,
        throttle_max_msgs_per_conn: 50,
        receiver: ReceiverSettings {
            check_mime_every: 1,
            // The mailboxes are read from what the receivers keep.
            keep_messages: !args.mailbox.is_empty(),
            ..ReceiverSettings::default()
        },
        ..GenSpec::default()
    }
}

/// The demo server's configuration: its data directory, the simulated DNS and receivers,
/// retries in seconds, and (with `--dkim`) a fresh signing key.
fn server_config(args: &DemoArgs, listen: ListenConfig, world: &World) -> Result<Config> {
    let mut config = Config {
        data_dir: args.data_dir.clone(),
        listen,
        ..Config::default()
    };
    config.dns.nameservers = vec![world.dns_addr()];
    config.delivery.port = world.smtp_port();
    config.delivery.helo_name = "herald.demo".into();
    if let Some(alg) = &args.dkim {
        let algorithm = match alg.as_str() {
            "rsa" => herald_auth::DkimAlgorithm::Rsa,
            "ed25519" => herald_auth::DkimAlgorithm::Ed25519,
            other => bail!("--dkim {other}: expected rsa or ed25519"),
        };
        let domain = LIST.rsplit_once('@').map_or(LIST, |(_, d)| d);
        let key_file =
            crate::dkim_cmd::keygen(domain, "demo", algorithm, &args.data_dir.join("dkim"))?;
        config.dkim.insert(
            domain.to_string(),
            herald_server::config::DkimDomainConfig {
                key: herald_server::config::DkimKeyConfig {
                    selector: "demo".into(),
                    key_file,
                    algorithm,
                },
                arc: !args.no_arc,
                second: None,
            },
        );
        let arc = if args.no_arc {
            ""
        } else {
            " and ARC-sealing it"
        };
        outln!("signing every copy with a {alg} DKIM key{arc} (selector demo._domainkey.{domain})");
    }
    // A demo should show retries happen, not wait minutes for them.
    config.scheduler.retry_initial_secs = 2;
    config.scheduler.destination_backoff_secs = 2;
    config.stats.enabled = !args.no_stats;
    config.http.admin_token = args.admin_token.clone().unwrap_or_default();
    // The demo runs its server inside this process, on loopback, against a simulated Internet:
    // whoever runs it (root in a fresh container) stays who they are.
    config.server.allow_root = true;
    Ok(config)
}

/// The post's summary as the server saw it, then as the receivers saw it.
fn print_results(summary: &PostSummary, world: &World) {
    post_cmd::print_summary(summary);
    let snap = world.recorder().snapshot();
    let elapsed_ms = summary.t100_ms.unwrap_or(0).max(1);
    outln!(
        "  rate              {:.0} copies/s",
        summary.delivered as f64 * 1000.0 / elapsed_ms as f64
    );
    outln!("receivers saw:");
    outln!("  copies accepted   {}", snap.accepted);
    outln!("  unique recipients {}", snap.unique_recipients);
    outln!("  duplicates        {}", snap.duplicates);
    outln!(
        "  malformed MIME    {} of {} checked",
        snap.mime_malformed,
        snap.mime_checked
    );
}

/// Keeps the demo server up for the dashboard, posting again every `repost_secs` and writing
/// the `--mailbox` addresses' mail.
async fn serve_on(api: &Api, args: &DemoArgs, world: &World) {
    use std::io::Write as _;
    outln!("dashboard: {}/", api.base());
    match &args.admin_token {
        Some(_) => outln!("sign in with the admin token given by --admin-token"),
        None => outln!("no admin token: the dashboard answers loopback clients only"),
    }
    outln!("serving; Ctrl-C to stop");
    let _ = std::io::stdout().flush();
    let limit = (args.serve_secs > 0).then(|| Duration::from_secs(args.serve_secs));
    let started = Instant::now();
    let mut next_post = Instant::now() + Duration::from_secs(args.repost_secs.max(1));
    let mut mailboxes: Vec<Mailbox> = args
        .mailbox
        .iter()
        .map(|a| Mailbox::new(a, &args.data_dir))
        .collect();
    for m in &mailboxes {
        outln!("mail to {}: {}", m.address, m.dir.display());
    }
    let mut next_mail = Instant::now();
    loop {
        if limit.is_some_and(|l| started.elapsed() >= l) {
            return;
        }
        if !mailboxes.is_empty() && Instant::now() >= next_mail {
            next_mail = Instant::now() + Duration::from_millis(500);
            let snap = world.recorder().snapshot();
            for m in &mut mailboxes {
                if let Err(e) = m.write_new(&snap) {
                    outln!("mailbox {}: {e:#}", m.address);
                }
            }
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if args.repost_secs > 0 && Instant::now() >= next_post {
            next_post = Instant::now() + Duration::from_secs(args.repost_secs);
            let path = format!("/api/v1/lists/{LIST}/posts");
            let posted: Result<Injected> = api
                .post_bytes(
                    &path,
                    demo_post(args.size_kb).into_bytes(),
                    "message/rfc822",
                )
                .await;
            match posted {
                Ok(r) => outln!("posted {}", r.post),
                Err(e) => outln!("repost failed: {e}"),
            }
            let _ = std::io::stdout().flush();
        }
    }
}

/// One `--mailbox`: where its mail goes and how many messages are written.
struct Mailbox {
    address: String,
    dir: PathBuf,
    written: usize,
}

impl Mailbox {
    fn new(address: &str, data_dir: &std::path::Path) -> Self {
        // The address names a directory: only characters that cannot leave it.
        let safe: String = address
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "@.-_+".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Mailbox {
            address: address.to_ascii_lowercase(),
            dir: data_dir.join("mailbox").join(safe.trim_start_matches('.')),
            written: 0,
        }
    }

    /// Writes the messages the receivers accepted for the address since the last call.
    fn write_new(&mut self, snap: &herald_sim::Snapshot) -> Result<()> {
        let copies: Vec<_> = snap
            .copies
            .iter()
            .filter(|c| c.recipient.eq_ignore_ascii_case(&self.address))
            .collect();
        if copies.len() <= self.written {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        for c in &copies[self.written..] {
            self.written += 1;
            let path = self.dir.join(format!("{}.eml", self.written));
            let bytes = c.message.as_deref().unwrap_or_default();
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

async fn wait_until_up(api: &Api) -> Result<()> {
    let started = Instant::now();
    loop {
        if api.get_bytes("/healthz").await.is_ok() {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("the demo server did not come up within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates the list, imports the members, posts, and waits for every recipient.
async fn fan_out(api: &Api, addresses: &[String], size_kb: usize) -> Result<PostSummary> {
    // An open list on purpose: the demo's poster is a local script, not a member whose
    // domain publishes SPF/DKIM, so on a `members` list (where `require_aligned_from` is on by
    // default) its post would be held as "unauthenticated sender".
    let settings = json!({
        "display_name": "Herald Demo",
        "posting_policy": "anyone",
        "subject_prefix": "[demo]",
        "footer": "--\nYou get this as {{name}} <{{email}}> (member since {{since}}).\nUnsubscribe: {{unsubscribe_url}}\n",
        "personalize": true,
    });
    let _created: ListInfo = api
        .post_json(
            "/api/v1/lists",
            &json!({"address": LIST, "settings": settings}),
        )
        .await?;
    let mut csv = String::from("email,name,since\n");
    for (i, a) in addresses.iter().enumerate() {
        csv.push_str(&format!("{a},Member {i},{}\n", 2000 + i % 26));
    }
    csv_import::import_bytes(api, LIST, csv.as_bytes()).await?;
    let post = demo_post(size_kb);
    let r: Injected = api
        .post_bytes(
            &format!("/api/v1/lists/{LIST}/posts"),
            post.into_bytes(),
            "message/rfc822",
        )
        .await?;
    let id = r.post;
    outln!("posted {id} to {LIST} ({} members)", addresses.len());
    post_cmd::wait_for_post(api, &id, Duration::from_secs(600)).await
}

fn demo_post(size_kb: usize) -> String {
    let mut body = String::new();
    let para = "Herald takes one post and gets a personal copy of it to every member, \
                as fast as the network allows, while part of the Internet is slow, dead \
                or hostile.\r\n";
    while body.len() < size_kb * 1024 {
        body.push_str(para);
    }
    format!(
        "From: Demo Poster <poster@herald.test>\r\n\
         To: {LIST}\r\n\
         Subject: Hello from the Herald demo\r\n\
         Message-ID: <demo-{}@herald.test>\r\n\
         Date: Sat, 21 Nov 2026 00:00:00 +0000\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         \r\n{body}",
        herald_types::unix_ms_now()
    )
}
