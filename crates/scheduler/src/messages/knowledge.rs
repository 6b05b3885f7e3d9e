//! What the actor and the cluster's shared knowledge (`herald-knowledge`)
//! tell each other, once per exchange interval: the cluster's view of each provider the node
//! sends to and the hosts other nodes marked down go in; the providers this node sends to, the
//! rates it lowered and the hosts it marked down since the last exchange come back.
//!
//! The values are already judged by the sender (`herald-knowledge` drops a rate that is not a
//! finite positive number, an address that does not parse): the actor applies them as given.

use crate::messages::HostKey;
use std::time::Duration;

/// The cluster's view of one provider (one shaping budget, by name).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderShare {
    /// The budget's name (`rule:<name>` or the provider's domain, see `actor::shaping`).
    pub budget: String,
    /// Alive nodes sending to it (at least 1: this node).
    pub senders: u32,
    /// This node's share of the provider's cluster-wide rate, copies per second, when the
    /// cluster has one (a node was refused for rate lately).
    pub share: Option<f64>,
    /// How `share` came about (both are taken as the pace; a newcomer's only when lower).
    pub change: ShareChange,
}

/// Why a provider's share is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareChange {
    /// Nothing new: only the senders are applied.
    None,
    /// A node (this one too) lowered the cluster's rate after a refusal.
    Lowered,
    /// This node starts sending to a provider other nodes pace: the share when lower.
    Joined,
    /// The nodes sending to the provider changed: the share replaces the pace.
    Rebalanced,
}

/// A host another node marked down.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedDownHost {
    pub key: HostKey,
    /// How long it stays down from now.
    pub remaining: Duration,
    /// Why, with the node that said so.
    pub reason: String,
}

/// The cluster's knowledge, for the actor.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterKnowledge {
    pub providers: Vec<ProviderShare>,
    pub down: Vec<SharedDownHost>,
}

/// A provider this node sends to.
#[derive(Debug, Clone, PartialEq)]
pub struct SendingTo {
    pub budget: String,
    /// Its pace now, copies per second (`None` while unpaced): the cluster sums the senders'.
    pub rate: Option<f64>,
    /// Copies per second the provider accepted from this node lately (the last second).
    pub accepted: f64,
    /// Its pace was cut on a rate refusal since the last exchange: the fraction of what the cluster's senders had accepted that the provider
    /// takes now (the store computes the cluster's rate from it).
    pub cut: Option<f64>,
}

/// The actor's knowledge, for the cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalKnowledge {
    pub sending: Vec<SendingTo>,
    /// Hosts this node marked down since the last exchange, with their time left.
    pub down: Vec<SharedDownHost>,
}
