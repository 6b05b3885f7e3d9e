//! Dropping root: started as root (to bind ports 25 and 24), `herald serve` switches to the
//! `[server] user` once its listeners are bound and its TLS key is read, before it opens a
//! store or reads a byte from the network — what Postfix's and nginx's masters do. Running on
//! as root needs `allow_root = true`, said out loud.
//!
//! The switch goes through glibc (`nix`): its setuid/setgid/setgroups change every thread of
//! the process (the runtime's workers already exist), where the raw system calls would change
//! only the calling thread. It is checked afterwards: regaining root must fail.
//!
//! SECURITY: the user and group names come from the operator's configuration file.

use herald_config::ServerSection;
use nix::unistd::{self, Gid, Group, Uid, User};
use std::ffi::CString;
use std::path::Path;

/// Why the server would not change, or keep, its user.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error(
        "refusing to run as root: set [server] user (e.g. \"herald\") to drop privileges once \
         the listeners are bound, or [server] allow_root = true to run as root on purpose"
    )]
    RootRefused,
    #[error("[server] user {0:?}: no such user")]
    NoUser(String),
    #[error("[server] group {0:?}: no such group")]
    NoGroup(String),
    #[error("[server] user {user:?} is root itself: name an unprivileged user")]
    UserIsRoot { user: String },
    #[error("cannot become {what}: {source}")]
    Switch {
        what: String,
        source: nix::errno::Errno,
    },
    #[error("data directory {path}: cannot hand it to {user}: {source}")]
    DataDir {
        path: String,
        user: String,
        source: nix::errno::Errno,
    },
    #[error("still able to regain root after switching to {0}: refusing to go on")]
    Regained(String),
}

/// What happened, for the start-up log.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not started as root: nothing to drop.
    NotRoot,
    /// Root, kept on purpose (`allow_root`).
    StayedRoot,
    /// Now running as this user.
    Became(String),
}

/// Drops root as `[server]` says. `data_dir` is created for the user if missing (the package's
/// or the operator's own directory is left as it is: its owner is their decision).
pub fn drop_root(section: &ServerSection, data_dir: &Path) -> Result<Outcome, PrivilegeError> {
    if !unistd::geteuid().is_root() {
        return Ok(Outcome::NotRoot);
    }
    if section.user.is_empty() {
        return if section.allow_root {
            Ok(Outcome::StayedRoot)
        } else {
            Err(PrivilegeError::RootRefused)
        };
    }
    let Some((user, gid)) = service_owner(section)? else {
        return Err(PrivilegeError::RootRefused);
    };
    if !data_dir.exists() {
        std::fs::create_dir_all(data_dir).map_err(|e| PrivilegeError::DataDir {
            path: data_dir.display().to_string(),
            user: section.user.clone(),
            source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)),
        })?;
        unistd::chown(data_dir, Some(user.uid), Some(gid)).map_err(|source| {
            PrivilegeError::DataDir {
                path: data_dir.display().to_string(),
                user: section.user.clone(),
                source,
            }
        })?;
    }
    switch(&user, gid)?;
    Ok(Outcome::Became(user.name))
}

/// The user and group `[server]` names (`None` when no user is set): who the service runs
/// as, and so who must own what `herald restore` writes when run as root.
pub fn service_owner(section: &ServerSection) -> Result<Option<(User, Gid)>, PrivilegeError> {
    if section.user.is_empty() {
        return Ok(None);
    }
    let user = User::from_name(&section.user)
        .ok()
        .flatten()
        .ok_or_else(|| PrivilegeError::NoUser(section.user.clone()))?;
    if user.uid.is_root() {
        return Err(PrivilegeError::UserIsRoot {
            user: section.user.clone(),
        });
    }
    let gid = if section.group.is_empty() {
        user.gid
    } else {
        Group::from_name(&section.group)
            .ok()
            .flatten()
            .ok_or_else(|| PrivilegeError::NoGroup(section.group.clone()))?
            .gid
    };
    Ok(Some((user, gid)))
}

/// Supplementary groups first (only while root may set them), then the group, then the user.
fn switch(user: &User, gid: Gid) -> Result<(), PrivilegeError> {
    let failed = |what: &str| {
        let what = format!("{what} of {}", user.name);
        move |source| PrivilegeError::Switch { what, source }
    };
    // A name with a NUL cannot come from the password database; initgroups needs a C string.
    let name = CString::new(user.name.as_bytes()).map_err(|_| PrivilegeError::Switch {
        what: format!("groups of {}", user.name),
        source: nix::errno::Errno::EINVAL,
    })?;
    unistd::initgroups(&name, gid).map_err(failed("the groups"))?;
    unistd::setgid(gid).map_err(failed("the group"))?;
    unistd::setuid(user.uid).map_err(failed("the user"))?;
    if unistd::setuid(Uid::from_raw(0)).is_ok() || unistd::geteuid().is_root() {
        return Err(PrivilegeError::Regained(user.name.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocking_pool_is_twice_the_cores_at_least_four_unless_set() {
        let auto = ServerSection::default().blocking_pool();
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(auto, (2 * cores).max(4));
        assert!(auto >= 4);
        let set = ServerSection {
            blocking_threads: 64,
            ..ServerSection::default()
        };
        assert_eq!(set.blocking_pool(), 64);
    }

    #[test]
    fn an_unknown_user_or_group_is_named() {
        // Only meaningful as root (otherwise there is nothing to drop); CI runs as root.
        if !unistd::geteuid().is_root() {
            let s = ServerSection::default();
            assert_eq!(
                drop_root(&s, Path::new("/nonexistent")).ok(),
                Some(Outcome::NotRoot)
            );
            return;
        }
        let no_user = ServerSection {
            user: "no-such-herald-user".into(),
            ..ServerSection::default()
        };
        let err = drop_root(&no_user, Path::new("/nonexistent")).expect_err("refused");
        assert!(err.to_string().contains("no-such-herald-user"), "{err}");
        let no_group = ServerSection {
            user: "nobody".into(),
            group: "no-such-herald-group".into(),
            ..ServerSection::default()
        };
        let err = drop_root(&no_group, Path::new("/nonexistent")).expect_err("refused");
        assert!(err.to_string().contains("no-such-herald-group"), "{err}");
        let root = ServerSection {
            user: "root".into(),
            ..ServerSection::default()
        };
        assert!(matches!(
            drop_root(&root, Path::new("/nonexistent")),
            Err(PrivilegeError::UserIsRoot { .. })
        ));
        let refused = drop_root(&ServerSection::default(), Path::new("/nonexistent"));
        assert!(matches!(refused, Err(PrivilegeError::RootRefused)));
        let allowed = ServerSection {
            allow_root: true,
            ..ServerSection::default()
        };
        assert_eq!(
            drop_root(&allowed, Path::new("/nonexistent")).ok(),
            Some(Outcome::StayedRoot)
        );
    }
}
