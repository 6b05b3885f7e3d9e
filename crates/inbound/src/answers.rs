//! The handler's answers for accepted recipients, kept from RCPT to the end of DATA so that the
//! handler does not look each recipient up twice (the directory answer found at RCPT
//! is carried to DATA).
//!
//! How they line up: the session adds a recipient to its envelope exactly when the handler
//! accepted it (a repeated RCPT for the same address is answered by the session without asking
//! the handler, and adds nothing), in RCPT order. So the envelope's recipients are the last
//! answers kept, in order. Answers of an abandoned transaction (RSET, a new MAIL) are older
//! than those, never in the way; the store is trimmed to `max_recipients` entries — a
//! transaction never has more — so it stays bounded however many transactions a peer abandons.
//!
//! Invariant: [`Answers::take`] returns one answer per envelope recipient, in order, or `None`
//! (a mismatch, which the checks above rule out): the connection then asks the handler again.

use herald_types::Address;
use std::collections::VecDeque;

/// Answers for the recipients of the current transaction (and at most a bounded tail of
/// abandoned ones).
pub(crate) struct Answers<R> {
    kept: VecDeque<(Address, R)>,
    max: usize,
}

impl<R> Answers<R> {
    /// A store for transactions of at most `max_recipients` distinct recipients.
    pub fn new(max_recipients: usize) -> Self {
        Answers {
            kept: VecDeque::new(),
            max: max_recipients.max(1),
        }
    }

    /// Keeps the answer for an accepted recipient.
    pub fn keep(&mut self, rcpt: Address, answer: R) {
        if self.kept.len() == self.max {
            self.kept.pop_front();
        }
        self.kept.push_back((rcpt, answer));
    }

    /// The answers for `rcpts` (the envelope's recipients), in order, and forgets everything:
    /// the transaction is over. `None` when they do not line up.
    pub fn take(&mut self, rcpts: &[Address]) -> Option<Vec<R>> {
        let kept = std::mem::take(&mut self.kept);
        let skip = kept.len().checked_sub(rcpts.len())?;
        let tail: Vec<(Address, R)> = kept.into_iter().skip(skip).collect();
        if tail.iter().zip(rcpts).any(|((a, _), r)| a != r) {
            return None;
        }
        Some(tail.into_iter().map(|(_, answer)| answer).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    #[test]
    fn the_last_answers_line_up_with_the_envelope() {
        let mut answers = Answers::new(3);
        answers.keep(a("old@l.test"), 0);
        answers.keep(a("x@l.test"), 1);
        answers.keep(a("y@l.test"), 2);
        assert_eq!(
            answers.take(&[a("x@l.test"), a("y@l.test")]),
            Some(vec![1, 2])
        );
        assert_eq!(answers.take(&[]), Some(vec![]), "emptied by the first take");
    }

    #[test]
    fn abandoned_transactions_stay_bounded_and_mismatches_are_refused() {
        let mut answers = Answers::new(2);
        for i in 0..1000 {
            answers.keep(a(&format!("r{i}@l.test")), i);
        }
        assert_eq!(answers.kept.len(), 2);
        assert_eq!(answers.take(&[a("r998@l.test"), a("nope@l.test")]), None);
        answers.keep(a("x@l.test"), 1);
        assert_eq!(
            answers.take(&[a("x@l.test"), a("y@l.test")]),
            None,
            "too few"
        );
    }
}
