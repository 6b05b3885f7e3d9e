//! The session slots of one listener, its stress mode, and shedding: what keeps the door open
//! under a connection flood (five hundred idle connections from a small botnet held
//! every slot for the whole command timeout, and five legitimate posts in six were refused).
//!
//! Postfix meets this with stress-dependent timeouts (`smtpd_timeout = ${stress?10}{300}`) and
//! postscreen; Herald does the first, and sheds idlers when the slots run out:
//!
//! - **Slots**: at most `max_sessions` sessions hold a [`SessionSlot`]; it is taken in the
//!   accept loop before the session task is spawned and given back when dropped (RAII).
//! - **Stress mode**: from `stress_threshold_percent` of the slots on, the listener is under
//!   stress. Sessions watch the flag ([`SessionBoard::stress`]) and, while idle with no MAIL
//!   yet, shorten their command deadline to `stress_command_timeout_secs` — those already
//!   waiting when stress begins too. It ends once the count falls a band (a twentieth of
//!   `max_sessions`) below the threshold, so a count hovering at the threshold does not wake
//!   every session at each connection.
//! - **Shedding**: when every slot is taken, the session that has waited longest for a
//!   command since our last reply, with no MAIL yet, is shed: its slot passes to the newcomer
//!   at once (under the lock, no waiting for the victim to close) and the victim's task gets a
//!   signal to send `421 4.7.0` if it can without waiting and close. "Longest since our last
//!   reply", not "oldest connection": a client that talks gets a reply at each command and
//!   stays fresh, while idlers and tricklers (who never complete a line) age from their banner.
//!
//! Invariants: a session in a transaction (MAIL given, until the reply to its end of DATA) is
//! never shed. The race between choosing a victim and the victim starting a transaction is
//! settled by one compare-and-swap on the slot's phase (idle → shed by the board, idle → busy
//! by the session): exactly one wins, and a session that lost it closes before any handler call
//! of its transaction. The slot count never exceeds `max_sessions`; a shed session's task may
//! outlive its slot by the one non-waiting write of its 421 (its file descriptor is the only
//! overshoot).
//!
//! SECURITY: the peer decides nothing here but when it sends; work per accepted connection is
//! one short lock and, when full, one scan of at most `max_sessions` slots.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Phases of a slot (an `AtomicU8`, so the session changes it without the board's lock).
const IDLE: u8 = 0;
const BUSY: u8 = 1;
const SHED: u8 = 2;

/// When stress mode begins and ends, in open sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StressBand {
    /// Stressed from this many open sessions on.
    on_at: usize,
    /// No longer stressed below this many.
    off_below: usize,
}

impl StressBand {
    /// `None` when `percent` is 0 (stress mode off).
    pub(crate) fn new(max_sessions: usize, percent: u8) -> Option<StressBand> {
        if percent == 0 {
            return None;
        }
        let on_at = (max_sessions * usize::from(percent.min(100)))
            .div_ceil(100)
            .max(1);
        let band = max_sessions / 20;
        Some(StressBand {
            on_at,
            off_below: on_at.saturating_sub(band).max(1),
        })
    }

    /// Whether a listener with `open` sessions is under stress, given whether it was.
    pub(crate) fn stressed(self, open: usize, was: bool) -> bool {
        match was {
            false => open >= self.on_at,
            true => open >= self.off_below,
        }
    }
}

/// What a listener's board does beyond counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BoardPolicy {
    pub max_sessions: usize,
    /// `None`: never under stress (LMTP, or `stress_threshold_percent = 0`).
    pub stress: Option<StressBand>,
    /// Shed the longest-idle session when full (`shed_idle_sessions`; never for LMTP).
    pub shed_idle: bool,
}

/// The session slots of one listener; shared by its accept loop and its sessions.
#[derive(Debug)]
pub(crate) struct SessionBoard {
    policy: BoardPolicy,
    /// Time zero of the slots' idle timestamps.
    epoch: Instant,
    /// A std Mutex: taken once per accepted connection and once per ended session, never
    /// across `.await`; the sessions' per-command updates go to their slot's atomics instead.
    slots: Mutex<Slots>,
    stress: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct Slots {
    open: HashMap<u64, Arc<SlotState>>,
    next_id: u64,
    stressed: bool,
}

/// What the board and one session share about it.
#[derive(Debug)]
struct SlotState {
    /// [`IDLE`], [`BUSY`] or [`SHED`].
    phase: AtomicU8,
    /// Milliseconds since the board's epoch of our last reply while idle (or of the admission).
    idle_since_ms: AtomicU64,
    /// Cancelled when the board sheds this session.
    shed: CancellationToken,
}

/// How a newcomer got its slot.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub slot: SessionSlot,
    /// An idle session was shed to make room.
    pub shed_one: bool,
}

impl SessionBoard {
    pub(crate) fn new(policy: BoardPolicy) -> Arc<SessionBoard> {
        Arc::new(SessionBoard {
            policy,
            epoch: Instant::now(),
            slots: Mutex::new(Slots::default()),
            stress: watch::Sender::new(false),
        })
    }

    /// The stress flag; sessions and the accept loop watch it.
    pub(crate) fn stress(&self) -> watch::Receiver<bool> {
        self.stress.subscribe()
    }

    /// Sessions holding a slot (tests, logs).
    pub(crate) fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// A slot for a newcomer: a free one, or the slot of the longest-idle session with no MAIL
    /// yet, which is shed; `None` when every slot is taken and none may be shed.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let now = self.now_ms();
        let mut slots = self.lock();
        let mut shed_one = false;
        if slots.open.len() >= self.policy.max_sessions {
            if !self.policy.shed_idle || !slots.shed_longest_idle() {
                return None;
            }
            shed_one = true;
        }
        let id = slots.next_id;
        slots.next_id += 1;
        let state = Arc::new(SlotState {
            phase: AtomicU8::new(IDLE),
            idle_since_ms: AtomicU64::new(now),
            shed: CancellationToken::new(),
        });
        slots.open.insert(id, state.clone());
        self.update_stress(&mut slots);
        Some(Admitted {
            slot: SessionSlot {
                board: self.clone(),
                id,
                state,
            },
            shed_one,
        })
    }

    fn release(&self, id: u64) {
        let mut slots = self.lock();
        // Absent when the session was shed: its slot already belongs to someone else.
        if slots.open.remove(&id).is_some() {
            self.update_stress(&mut slots);
        }
    }

    fn update_stress(&self, slots: &mut Slots) {
        let Some(band) = self.policy.stress else {
            return;
        };
        let stressed = band.stressed(slots.open.len(), slots.stressed);
        if stressed != slots.stressed {
            slots.stressed = stressed;
            // Synchronous, and it never waits: fine under the std Mutex.
            self.stress.send_replace(stressed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // A poisoned lock only means a thread panicked between two map updates; the map is
        // still a set of open slots, good enough to keep serving.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Slots {
    /// Sheds the idle session that has waited longest since our last reply; false if none is
    /// idle. Loops only when a candidate started a transaction between the scan and the swap.
    fn shed_longest_idle(&mut self) -> bool {
        loop {
            let candidates = self.open.iter().map(|(id, s)| {
                let idle = s.phase.load(Ordering::Acquire) == IDLE;
                (*id, idle.then(|| s.idle_since_ms.load(Ordering::Acquire)))
            });
            let Some(victim) = longest_idle(candidates) else {
                return false;
            };
            let Some(state) = self.open.get(&victim).cloned() else {
                return false;
            };
            let swapped =
                state
                    .phase
                    .compare_exchange(IDLE, SHED, Ordering::AcqRel, Ordering::Acquire);
            if swapped.is_ok() {
                self.open.remove(&victim);
                state.shed.cancel();
                return true;
            }
        }
    }
}

/// The session to shed among `(id, idle since)` pairs (`None`: in a transaction): the
/// smallest idle-since time, the older slot on a tie.
pub(crate) fn longest_idle(candidates: impl Iterator<Item = (u64, Option<u64>)>) -> Option<u64> {
    candidates
        .filter_map(|(id, since)| since.map(|since| (since, id)))
        .min()
        .map(|(_, id)| id)
}

/// One session's slot on its listener's board; given back on drop.
#[derive(Debug)]
pub(crate) struct SessionSlot {
    board: Arc<SessionBoard>,
    id: u64,
    state: Arc<SlotState>,
}

impl SessionSlot {
    /// The session entered a transaction (MAIL accepted): it may no longer be shed. False when
    /// it was shed first; the session must then close without running the transaction.
    pub(crate) fn begin_transaction(&self) -> bool {
        match self
            .state
            .phase
            .compare_exchange(IDLE, BUSY, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(phase) => phase == BUSY,
        }
    }

    /// We wrote a reply to a session with no transaction: it is idle from now (again).
    pub(crate) fn idle_from_now(&self) {
        // The time first: the board must not see the slot idle with an older time than it has.
        self.state
            .idle_since_ms
            .store(self.board.now_ms(), Ordering::Release);
        let _ = self
            .state
            .phase
            .compare_exchange(BUSY, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Cancelled when the board sheds this session.
    pub(crate) fn shed_signal(&self) -> &CancellationToken {
        &self.state.shed
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.board.release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(max_sessions: usize, percent: u8, shed_idle: bool) -> Arc<SessionBoard> {
        SessionBoard::new(BoardPolicy {
            max_sessions,
            stress: StressBand::new(max_sessions, percent),
            shed_idle,
        })
    }

    #[test]
    fn stress_begins_at_the_threshold_and_ends_a_band_below_it() {
        let band = StressBand::new(500, 75).unwrap();
        assert_eq!(band.on_at, 375);
        assert_eq!(band.off_below, 350);
        assert!(!band.stressed(374, false));
        assert!(band.stressed(375, false));
        assert!(band.stressed(351, true), "inside the band: still stressed");
        assert!(band.stressed(350, true));
        assert!(!band.stressed(349, true));
        assert_eq!(StressBand::new(500, 0), None, "0 = never");
        let full = StressBand::new(500, 100).unwrap();
        assert!(!full.stressed(499, false) && full.stressed(500, false));
        // Tiny listeners: at least one session, no band below one.
        let tiny = StressBand::new(4, 50).unwrap();
        assert_eq!((tiny.on_at, tiny.off_below), (2, 2));
        assert_eq!(StressBand::new(1, 1).unwrap().on_at, 1);
    }

    #[test]
    fn the_victim_is_the_longest_idle_and_never_a_busy_one() {
        assert_eq!(longest_idle(std::iter::empty()), None);
        assert_eq!(longest_idle([(1, None), (2, None)].into_iter()), None);
        let v = [(1, Some(500)), (2, None), (3, Some(100)), (4, Some(100))];
        assert_eq!(
            longest_idle(v.into_iter()),
            Some(3),
            "oldest time, then oldest slot"
        );
        assert_eq!(longest_idle([(9, Some(7)), (2, None)].into_iter()), Some(9));
    }

    #[test]
    fn a_full_board_sheds_the_longest_idle_and_hands_its_slot_over() {
        let b = board(3, 100, true);
        let slots: Vec<_> = (0..3).map(|_| b.admit().unwrap().slot).collect();
        // 0 talks (fresh reply), 1 is in a transaction, 2 has been silent since its banner.
        for (s, since) in slots.iter().zip([900, 0, 50]) {
            s.state.idle_since_ms.store(since, Ordering::Release);
        }
        assert!(slots[1].begin_transaction());
        let newcomer = b.admit().unwrap();
        assert!(newcomer.shed_one);
        newcomer
            .slot
            .state
            .idle_since_ms
            .store(1000, Ordering::Release);
        assert!(slots[2].shed_signal().is_cancelled());
        assert!(!slots[2].begin_transaction(), "shed first: no transaction");
        assert!(!slots[0].shed_signal().is_cancelled());
        assert_eq!(b.open(), 3, "the count never passes max_sessions");
        // The victim's drop does not give back the slot it no longer holds.
        let [talker, busy, victim] = <[SessionSlot; 3]>::try_from(slots).unwrap();
        drop(victim);
        assert_eq!(b.open(), 3);
        // Next: the talker (the newcomer is younger); then only the busy one and the newer
        // sessions are left, and a busy one is never shed.
        let second = b.admit().unwrap();
        assert!(talker.shed_signal().is_cancelled());
        assert!(newcomer.slot.begin_transaction() && second.slot.begin_transaction());
        assert!(b.admit().is_none(), "all in transactions: refused");
        assert!(!busy.shed_signal().is_cancelled());
        // A transaction's end makes it sheddable again.
        busy.idle_from_now();
        assert!(b.admit().is_some());
        assert!(busy.shed_signal().is_cancelled());
    }

    #[test]
    fn without_shedding_a_full_board_refuses_and_slots_come_back_on_drop() {
        let b = board(2, 0, false);
        let one = b.admit().unwrap().slot;
        let _two = b.admit().unwrap().slot;
        assert!(b.admit().is_none());
        drop(one);
        assert_eq!(b.open(), 1);
        assert!(b.admit().is_some());
    }

    #[test]
    fn the_stress_flag_follows_the_count_with_hysteresis() {
        let b = board(40, 50, true);
        let rx = b.stress();
        let mut held: Vec<_> = (0..19).map(|_| b.admit().unwrap().slot).collect();
        assert!(!*rx.borrow());
        held.push(b.admit().unwrap().slot);
        assert!(*rx.borrow(), "20 of 40 = 50 %");
        held.truncate(18);
        assert!(*rx.borrow(), "18: inside the band of 2");
        held.truncate(17);
        assert!(!*rx.borrow());
        let never = board(2, 0, true);
        let _full: Vec<_> = (0..2).map(|_| never.admit().unwrap().slot).collect();
        assert!(!*never.stress().borrow());
    }
}
