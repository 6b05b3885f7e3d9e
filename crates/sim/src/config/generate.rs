//! Generated worlds: N domains with Zipf-shaped sizes (a few huge providers, a long tail), a
//! deterministic share of misbehaving hosts, and a deterministic member list.
//!
//! Determinism: the same [`GenSpec`] always gives the same world, and the same world and member
//! count always give the same member list, on every platform and build (a fixed SplitMix64
//! generator, not `rand`, whose streams may change between versions).
//!
//! Meaning of the fractions: each is a share of *members* (by domain weight), realised with whole
//! domains. Domains are taken greedily — in rank order for `throttle` (big providers throttle),
//! in a seeded random order for the others — skipping any domain that would overshoot the share
//! by more than 2 %, so a fraction of 2 % never makes the biggest provider hung. A positive
//! fraction always gets at least one domain. A domain has one profile; `starttls` is independent.
//! `unknown_users` is the share of members that get 550 5.1.1: domains with that profile reject
//! `unknown_users_rate` of their users, so they cover `unknown_users / unknown_users_rate`.
//!
//! Layout: domain of rank r is `d{r:04}.example` with MX `mx.d{r:04}.example` at 127.1.x.y
//! (127.(1 + r / 64516).(r / 254 % 254 + 1).(r % 254 + 1)); the three biggest also get a backup
//! MX `mx2.` at 127.255.0.(r + 1).
//!
//! `rate_limited` domains (taken in rank order, like `throttle`: the biggest are the large
//! provider) are all hosted by one provider: [`PROVIDER_MX_HOSTS`] hosts `mx{k}.provider.example`
//! at 127.255.1.k sharing one rate budget, each domain published with two of them (the pair
//! rotating with the rank, as a provider's MX answers differ between its domains). Domains
//! picked for `hung_primary` have a hung primary and a working `mx3.` (preference 30) at
//! 127.255.2.1 upwards; domains picked for `dead_addrs` have one MX name with three addresses
//! (the primary's refuses connections, then a hung one, then a working one, from the same
//! range). Greylisting
//! domains say their interval in the reply text every other domain (in the order they were
//! picked), as some real greylisting servers do and others not.
//!
//! SECURITY: every generated address is in 127.0.0.0/8 and never 127.0.0.1; the result goes
//! through the same validation as a parsed world.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::{
    DaneSpec, DomainConfig, ExtraMx, Profile, ReceiverSettings, WorldConfig, DEFAULT_MX_PREFERENCE,
};
use crate::ConfigError;

/// Most domains a generated world may have (the 127.1.0.0–127.254.255.255 address plan).
pub const MAX_GENERATED_DOMAINS: usize = 253 * 254 * 254;
/// Overshoot tolerated when filling a profile's share.
const OVERSHOOT: f64 = 1.02;
/// How many of the biggest domains get a backup MX.
const BACKUP_MX_TOP: usize = 3;
/// MX hosts of the rate-limited provider (see the module docs).
pub const PROVIDER_MX_HOSTS: usize = 4;
/// The rate budget name the provider's hosts share.
const PROVIDER_BUDGET: &str = "provider.example";

/// Shares of members (see the module docs) per misbehaviour.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileFractions {
    pub hung: f64,
    pub refused: f64,
    pub greylist: f64,
    pub slow: f64,
    pub unknown_users: f64,
    pub throttle: f64,
    pub drop_mid_data: f64,
    /// Share of members at the rate-limited provider (see the module docs).
    pub rate_limited: f64,
    /// Share of members whose hosts drop each recipient's first attempt mid-DATA.
    pub drop_first_attempt: f64,
    /// Share of members whose hosts are tarpits (every reply byte by byte, see `Profile::Tarpit`).
    pub tarpit: f64,
    /// Share of members whose domain's primary MX is hung, with a working secondary behind it.
    pub hung_primary: f64,
    /// Share of members whose domain's one MX name has three addresses: the first refuses
    /// connections, the second is hung, the third works.
    pub dead_addrs: f64,
    /// Share of members whose hosts offer STARTTLS (independent of the profile).
    pub starttls: f64,
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenSpec {
    /// Number of domains.
    pub domains: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// Zipf exponent s: the domain of rank r weighs 1 / r^s (1.0 is the classic shape; 0 makes
    /// all domains equal).
    pub zipf_exponent: f64,
    /// Shares of members per misbehaviour.
    pub fractions: ProfileFractions,
    /// Receiver port (0 = pick a free one at start).
    pub smtp_port: u16,
    /// Delay of `slow` hosts before each reply.
    pub slow_delay_ms: u64,
    /// Greylisting interval.
    pub greylist_retry_after_secs: f64,
    /// Share of users an `unknown_users` domain rejects.
    pub unknown_users_rate: f64,
    /// Messages per connection a `throttle` host accepts before 421 4.7.28.
    pub throttle_max_msgs_per_conn: u32,
    /// Messages per connection a `drop_mid_data` host accepts before dropping one.
    pub drop_after_msgs: u32,
    /// Messages per second the rate-limited provider accepts over all its MX hosts.
    pub rate_limit_msgs_per_sec: u32,
    /// Messages per connection the rate-limited provider accepts before `421 4.7.28`.
    pub rate_limit_max_msgs_per_conn: u32,
    /// Delay of `tarpit` hosts before each byte of a reply.
    pub tarpit_byte_delay_ms: u64,
    /// Sessions a `tarpit` host serves at once.
    pub tarpit_max_sessions: u32,
    /// Receiver settings of the world.
    pub receiver: ReceiverSettings,
}

impl Default for GenSpec {
    fn default() -> Self {
        GenSpec {
            domains: 100,
            seed: 1,
            zipf_exponent: 1.0,
            fractions: ProfileFractions::default(),
            smtp_port: 0,
            slow_delay_ms: 500,
            greylist_retry_after_secs: 60.0,
            unknown_users_rate: 0.5,
            throttle_max_msgs_per_conn: 100,
            drop_after_msgs: 10,
            rate_limit_msgs_per_sec: 300,
            rate_limit_max_msgs_per_conn: 100,
            tarpit_byte_delay_ms: 100,
            tarpit_max_sessions: 4,
            receiver: ReceiverSettings::default(),
        }
    }
}

/// SplitMix64: tiny, fast, and its output is fixed forever (unlike library RNG streams).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (n > 0); the modulo bias is negligible for the sizes used.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

fn check_fraction(key: &str, v: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        let msg = format!("expected a fraction between 0 and 1, got {v}");
        Err(ConfigError::key(key, msg))
    }
}

fn check_spec(spec: &GenSpec) -> Result<(), ConfigError> {
    if spec.domains == 0 || spec.domains > MAX_GENERATED_DOMAINS {
        let msg = format!("expected 1..={MAX_GENERATED_DOMAINS}, got {}", spec.domains);
        return Err(ConfigError::key("gen.domains", msg));
    }
    if !spec.zipf_exponent.is_finite() || spec.zipf_exponent < 0.0 {
        let msg = format!("expected a number >= 0, got {}", spec.zipf_exponent);
        return Err(ConfigError::key("gen.zipf_exponent", msg));
    }
    let f = &spec.fractions;
    let profiles = [
        ("gen.fractions.hung", f.hung),
        ("gen.fractions.refused", f.refused),
        ("gen.fractions.greylist", f.greylist),
        ("gen.fractions.slow", f.slow),
        ("gen.fractions.throttle", f.throttle),
        ("gen.fractions.drop_mid_data", f.drop_mid_data),
        ("gen.fractions.rate_limited", f.rate_limited),
        ("gen.fractions.drop_first_attempt", f.drop_first_attempt),
        ("gen.fractions.tarpit", f.tarpit),
        ("gen.fractions.hung_primary", f.hung_primary),
        ("gen.fractions.dead_addrs", f.dead_addrs),
    ];
    for (key, v) in profiles {
        check_fraction(key, v)?;
    }
    check_fraction("gen.fractions.starttls", f.starttls)?;
    check_fraction("gen.fractions.unknown_users", f.unknown_users)?;
    if !(spec.unknown_users_rate > 0.0 && spec.unknown_users_rate <= 1.0) {
        let msg = format!("expected (0, 1], got {}", spec.unknown_users_rate);
        return Err(ConfigError::key("gen.unknown_users_rate", msg));
    }
    let g = spec.greylist_retry_after_secs;
    if !(0.0..=86_400.0).contains(&g) {
        let msg = format!("expected seconds between 0 and 86400, got {g}");
        return Err(ConfigError::key("gen.greylist_retry_after_secs", msg));
    }
    if spec.tarpit_max_sessions == 0 || spec.tarpit_byte_delay_ms > 60_000 {
        let msg = "expected tarpit_max_sessions > 0 and tarpit_byte_delay_ms <= 60000";
        return Err(ConfigError::key("gen.tarpit_byte_delay_ms", msg));
    }
    if spec.rate_limit_msgs_per_sec == 0 || spec.rate_limit_max_msgs_per_conn == 0 {
        let msg = "expected rate_limit_msgs_per_sec and rate_limit_max_msgs_per_conn > 0";
        return Err(ConfigError::key("gen.rate_limit_msgs_per_sec", msg));
    }
    let covered = f.unknown_users / spec.unknown_users_rate;
    let total: f64 = profiles.iter().map(|(_, v)| v).sum::<f64>() + covered;
    if total > 1.0 {
        let msg = format!("the profile shares add up to {total:.3} of the members (max 1)");
        return Err(ConfigError::key("gen.fractions", msg));
    }
    Ok(())
}

/// The address plan of the module docs.
fn primary_addr(rank: usize) -> Ipv4Addr {
    let b = 1 + rank / (254 * 254);
    let c = (rank / 254) % 254 + 1;
    let d = rank % 254 + 1;
    Ipv4Addr::new(127, b as u8, c as u8, d as u8)
}

/// Greedily picks unassigned domains from `order` until their weight reaches `share` of the
/// total; marks them in `taken`.
fn pick(order: &[usize], weights: &[f64], share: f64, taken: &mut [bool]) -> Vec<usize> {
    let total: f64 = weights.iter().sum();
    let need = share * total;
    let mut got = 0.0;
    let mut out = Vec::new();
    if need <= 0.0 {
        return out;
    }
    for &i in order {
        if !taken[i] && got + weights[i] <= need * OVERSHOOT {
            taken[i] = true;
            got += weights[i];
            out.push(i);
        }
    }
    if out.is_empty() {
        let smallest = order
            .iter()
            .copied()
            .filter(|&i| !taken[i])
            .min_by(|&a, &b| weights[a].total_cmp(&weights[b]).then(b.cmp(&a)));
        if let Some(i) = smallest {
            taken[i] = true;
            out.push(i);
        }
    }
    out
}

impl WorldConfig {
    /// Generates a world (see the module docs for the shape and the meaning of the fractions).
    pub fn generate(spec: &GenSpec) -> Result<WorldConfig, ConfigError> {
        check_spec(spec)?;
        let n = spec.domains;
        let weights: Vec<f64> = (0..n)
            .map(|r| 1.0 / ((r + 1) as f64).powf(spec.zipf_exponent))
            .collect();
        let (profiles, layouts) = assign_profiles(spec, &weights);
        let mut extra_addrs = 0usize;
        let mut rng = SplitMix64(spec.seed ^ 0x0053_5441_5254_4c53);
        let mut random_order: Vec<usize> = (0..n).collect();
        rng.shuffle(&mut random_order);
        let mut tls = vec![false; n];
        pick(&random_order, &weights, spec.fractions.starttls, &mut tls);

        let width = (n.saturating_sub(1)).to_string().len().max(4);
        let domains = (0..n)
            .map(|r| {
                let name = format!("d{r:0width$}.example");
                if matches!(profiles[r], Profile::RateLimited { .. }) {
                    return Ok(provider_domain(name, weights[r], r, &profiles[r]));
                }
                let extra_mx = if r < BACKUP_MX_TOP && n > BACKUP_MX_TOP {
                    vec![ExtraMx {
                        host: format!("mx2.{name}"),
                        addr: Ipv4Addr::new(127, 255, 0, (r + 1) as u8),
                        preference: DEFAULT_MX_PREFERENCE + 10,
                        profile: None,
                    }]
                } else {
                    Vec::new()
                };
                let mut d = DomainConfig {
                    mx_host: format!("mx.{name}"),
                    name,
                    weight: weights[r],
                    mx_addr: primary_addr(r),
                    mx_preference: DEFAULT_MX_PREFERENCE,
                    extra_mx,
                    profile: profiles[r].clone(),
                    starttls: tls[r],
                    dane: DaneSpec::default(),
                    extensions: Default::default(),
                };
                lay_out(&mut d, layouts[r], &mut extra_addrs)?;
                Ok(d)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let cfg = WorldConfig {
            smtp_port: spec.smtp_port,
            receiver: spec.receiver.clone(),
            domains,
            ..WorldConfig::empty()
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// How many of `n` members each domain gets: proportional to weight, by largest remainder
    /// (ties to the lower rank), so the counts add up to exactly `n`.
    pub fn member_counts(&self, n: usize) -> Vec<usize> {
        let total: f64 = self.domains.iter().map(|d| d.weight).sum();
        if self.domains.is_empty() || total <= 0.0 {
            return vec![0; self.domains.len()];
        }
        let quotas: Vec<f64> = self
            .domains
            .iter()
            .map(|d| n as f64 * d.weight / total)
            .collect();
        let mut counts: Vec<usize> = quotas.iter().map(|q| q.floor() as usize).collect();
        let assigned: usize = counts.iter().sum();
        let mut by_remainder: Vec<usize> = (0..counts.len()).collect();
        by_remainder.sort_by(|&a, &b| {
            let (ra, rb) = (quotas[a] - quotas[a].floor(), quotas[b] - quotas[b].floor());
            rb.total_cmp(&ra).then(a.cmp(&b))
        });
        for &i in by_remainder.iter().cycle().take(n.saturating_sub(assigned)) {
            counts[i] += 1;
        }
        counts
    }

    /// `n` distinct member addresses spread over the domains by weight
    /// ([`WorldConfig::member_counts`]), `m0000000@d0000.example` style, in a deterministic
    /// interleaved order (members of a real list are not sorted by domain).
    pub fn member_addresses(&self, n: usize) -> Vec<String> {
        let counts = self.member_counts(n);
        let mut out = Vec::with_capacity(n);
        let mut k = 0usize;
        for (d, &c) in self.domains.iter().zip(&counts) {
            for _ in 0..c {
                out.push(format!("m{k:07}@{}", d.name));
                k += 1;
            }
        }
        SplitMix64(0x004d_454d_4245_5253 ^ n as u64).shuffle(&mut out);
        out
    }
}

/// A domain hosted by the rate-limited provider: two of its MX hosts, rotating with the rank.
fn provider_domain(name: String, weight: f64, rank: usize, profile: &Profile) -> DomainConfig {
    let host = |k: usize| {
        let k = k % PROVIDER_MX_HOSTS + 1;
        (
            format!("mx{k}.{PROVIDER_BUDGET}"),
            Ipv4Addr::new(127, 255, 1, k as u8),
        )
    };
    let (mx_host, mx_addr) = host(rank);
    let (second, second_addr) = host(rank + 1);
    DomainConfig {
        name,
        weight,
        mx_host,
        mx_addr,
        mx_preference: DEFAULT_MX_PREFERENCE,
        extra_mx: vec![ExtraMx {
            host: second,
            addr: second_addr,
            preference: DEFAULT_MX_PREFERENCE + 10,
            profile: None,
        }],
        profile: profile.clone(),
        // One provider, one behaviour: its hosts are shared, so their TLS offer must agree.
        starttls: false,
        dane: DaneSpec::default(),
        extensions: Default::default(),
    }
}

/// How a domain's MX hosts are laid out beyond its profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The primary (and the top domains' backup) only.
    Plain,
    /// The primary is hung; `mx3.` behind it works.
    HungPrimary,
    /// The primary's name has three addresses: refused, hung, working.
    DeadAddrs,
}

/// Addresses of the hosts [`Layout`] adds: 127.255.2.1 upwards (below the broadcast octet).
const EXTRA_ADDRS: usize = 253 * 254;

fn extra_addr(next: &mut usize) -> Result<Ipv4Addr, ConfigError> {
    let i = *next;
    if i >= EXTRA_ADDRS {
        let msg =
            format!("more than {EXTRA_ADDRS} extra hosts for hung primaries and dead addresses");
        return Err(ConfigError::key("gen.fractions", msg));
    }
    *next += 1;
    Ok(Ipv4Addr::new(
        127,
        255,
        (2 + i / 254) as u8,
        (i % 254 + 1) as u8,
    ))
}

/// Applies a domain's [`Layout`]: the extra hosts get addresses from `next`.
fn lay_out(d: &mut DomainConfig, layout: Layout, next: &mut usize) -> Result<(), ConfigError> {
    match layout {
        Layout::Plain => {}
        Layout::HungPrimary => {
            d.profile = Profile::Hung;
            d.extra_mx.push(ExtraMx {
                host: format!("mx3.{}", d.name),
                addr: extra_addr(next)?,
                preference: DEFAULT_MX_PREFERENCE + 20,
                profile: Some(Profile::Normal),
            });
        }
        Layout::DeadAddrs => {
            d.profile = Profile::Refused;
            for profile in [Profile::Hung, Profile::Normal] {
                d.extra_mx.push(ExtraMx {
                    host: d.mx_host.clone(),
                    addr: extra_addr(next)?,
                    preference: DEFAULT_MX_PREFERENCE,
                    profile: Some(profile),
                });
            }
        }
    }
    Ok(())
}

/// The profile and layout of every domain, by rank.
fn assign_profiles(spec: &GenSpec, weights: &[f64]) -> (Vec<Profile>, Vec<Layout>) {
    let n = weights.len();
    let f = &spec.fractions;
    let mut taken = vec![false; n];
    let mut profiles = vec![Profile::Normal; n];
    let rank_order: Vec<usize> = (0..n).collect();
    let throttle = Profile::Throttle {
        max_msgs_per_conn: Some(spec.throttle_max_msgs_per_conn.max(1)),
        max_msgs_per_min: None,
    };
    let provider = Profile::RateLimited {
        budget: PROVIDER_BUDGET.to_string(),
        msgs_per_sec: spec.rate_limit_msgs_per_sec,
        max_msgs_per_conn: Some(spec.rate_limit_max_msgs_per_conn),
    };
    for i in pick(&rank_order, weights, f.rate_limited, &mut taken) {
        profiles[i] = provider.clone();
    }
    for i in pick(&rank_order, weights, f.throttle, &mut taken) {
        profiles[i] = throttle.clone();
    }
    let mut rng = SplitMix64(spec.seed);
    let mut order: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut order);
    let plan = [
        (f.hung, Profile::Hung),
        (f.refused, Profile::Refused),
        (
            f.drop_mid_data,
            Profile::DropMidData {
                after_msgs: spec.drop_after_msgs,
            },
        ),
        (f.drop_first_attempt, Profile::DropFirstAttempt),
        (
            f.tarpit,
            Profile::Tarpit {
                byte_delay: Duration::from_millis(spec.tarpit_byte_delay_ms),
                max_sessions: Some(spec.tarpit_max_sessions),
            },
        ),
        (
            f.greylist,
            Profile::Greylist {
                retry_after: Duration::from_secs_f64(spec.greylist_retry_after_secs),
                announce: false,
            },
        ),
        (
            f.slow,
            Profile::Slow {
                delay: Duration::from_millis(spec.slow_delay_ms),
            },
        ),
        (
            f.unknown_users / spec.unknown_users_rate,
            Profile::UnknownUsers {
                users: Vec::new(),
                fraction: spec.unknown_users_rate,
            },
        ),
    ];
    for (share, profile) in plan {
        for (k, i) in pick(&order, weights, share, &mut taken)
            .into_iter()
            .enumerate()
        {
            profiles[i] = match &profile {
                Profile::Greylist { retry_after, .. } => Profile::Greylist {
                    retry_after: *retry_after,
                    announce: k % 2 == 0,
                },
                p => p.clone(),
            };
        }
    }
    let mut layouts = vec![Layout::Plain; n];
    for (share, layout) in [
        (f.hung_primary, Layout::HungPrimary),
        (f.dead_addrs, Layout::DeadAddrs),
    ] {
        for i in pick(&order, weights, share, &mut taken) {
            layouts[i] = layout;
        }
    }
    (profiles, layouts)
}
