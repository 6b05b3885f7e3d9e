//! The server process on its host: what `herald serve` needs from the operating system before
//! and around the stages, apart from the composition root so that root stays a table of stages.
//!
//! - [`privileges`]: dropping root once the listeners are bound;
//! - [`descriptors`]: the open-files limit raised and a budget checked before anything opens;
//! - [`reserve`]: the disk reserve that lets a start and a stop proceed on a full disk;
//! - [`memory`]: freed heap given back to the system;
//! - [`secret`]: the installation's token secret (its file, or the cluster's in the store).

pub mod descriptors;
pub mod memory;
pub mod privileges;
pub mod reserve;
pub mod secret;
