//! Handler test doubles: a scriptable [`MockHandler`] and the [`HandlerHandle`] that steers and observes it.
//!
//! In the style of `tower-test`'s `mock::pair`, [`handler()`] returns two ends
//! sharing one state: register the [`MockHandler`] with the code under test
//! and keep the [`HandlerHandle`] to inject failures, panics or a blocking
//! gate, and to observe what was delivered. The handle's `wait_for_*` methods
//! resolve as soon as a counter is reached, so tests never sleep.
//!
//! Each call to [`Handler::handle`] goes through these steps:
//!
//! 1. It is recorded: [`HandlerHandle::calls`] and
//!    [`HandlerHandle::deliveries`] see it before anything else happens.
//! 2. If the gate is closed ([`HandlerHandle::block`]), it waits there,
//!    counted by [`HandlerHandle::blocked`], until [`HandlerHandle::release`]
//!    or [`HandlerHandle::succeed`].
//! 3. Its outcome is then chosen, first match wins: an injected panic
//!    ([`HandlerHandle::panic_next`]), a permanent error
//!    ([`HandlerHandle::fail_permanently`]), a retryable error
//!    ([`HandlerHandle::fail_next`]), otherwise success, which
//!    [`HandlerHandle::succeeded_ids`] records.
//!
//! ```
//! use diesel_outbox_core::{Delivery, Handler, Task, TaskId};
//! use diesel_outbox_testkit::handler;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (mock, handle) = handler::failing(1);
//! let delivery = Delivery::new(TaskId::new(1), 1, Task::new("order.created", 1, "{}"));
//!
//! assert!(mock.handle(delivery.clone()).await.is_err());
//! assert!(mock.handle(delivery).await.is_ok());
//! assert_eq!(handle.calls(), 2);
//! assert_eq!(handle.succeeded_ids(), vec![TaskId::new(1)]);
//! # }
//! ```

use std::{
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use async_trait::async_trait;
use diesel_outbox_core::{Delivery, Handler, HandlerError, TaskId};
use tokio::sync::watch;

/// The message of the retryable error injected by [`HandlerHandle::fail_next`].
pub const INJECTED_FAILURE: &str = "injected failure";

/// The message of the permanent error injected by
/// [`HandlerHandle::fail_permanently`].
pub const INJECTED_PERMANENT_FAILURE: &str = "injected permanent failure";

/// The panic message injected by [`HandlerHandle::panic_next`].
pub const INJECTED_PANIC: &str = "injected panic";

/// A pair of a handler that records every call and succeeds, and its handle.
///
/// Equivalent to [`recording()`]; configure it through the handle.
pub fn handler() -> (MockHandler, HandlerHandle) {
    let shared = Arc::new(Shared::new());
    (
        MockHandler {
            shared: Arc::clone(&shared),
        },
        HandlerHandle { shared },
    )
}

/// A handler that succeeds on every call and records it.
pub fn recording() -> (MockHandler, HandlerHandle) {
    handler()
}

/// A handler whose first `n` calls return a retryable error, then succeed.
pub fn failing(n: usize) -> (MockHandler, HandlerHandle) {
    let (mock, handle) = handler();
    handle.fail_next(n);
    (mock, handle)
}

/// A handler whose every call returns a permanent error until
/// [`HandlerHandle::succeed`].
pub fn failing_permanently() -> (MockHandler, HandlerHandle) {
    let (mock, handle) = handler();
    handle.fail_permanently();
    (mock, handle)
}

/// A handler whose calls wait at a closed gate until
/// [`HandlerHandle::release`].
pub fn blocking() -> (MockHandler, HandlerHandle) {
    let (mock, handle) = handler();
    handle.block();
    (mock, handle)
}

/// A handler whose first `n` calls panic with `"injected panic"`, then
/// succeed.
pub fn panicking(n: usize) -> (MockHandler, HandlerHandle) {
    let (mock, handle) = handler();
    handle.panic_next(n);
    (mock, handle)
}

/// A scriptable [`Handler`] driven by its [`HandlerHandle`].
///
/// Clones share the same state: register one clone per `(kind, version)` and
/// every call shows up on the one handle.
#[derive(Clone)]
pub struct MockHandler {
    shared: Arc<Shared>,
}

/// Controls and observes the [`MockHandler`]s it was created with.
///
/// Clones share the same state. Behaviour changes apply to calls that have
/// not chosen their outcome yet, including calls waiting at a closed gate.
#[derive(Clone)]
pub struct HandlerHandle {
    shared: Arc<Shared>,
}

/// State shared by a [`MockHandler`] and its [`HandlerHandle`]s.
struct Shared {
    state: Mutex<State>,
    /// Number of calls entered; updated under `state`'s lock.
    calls: watch::Sender<usize>,
    /// Number of successful calls; updated under `state`'s lock.
    successes: watch::Sender<usize>,
    /// Number of calls waiting at the gate.
    blocked: watch::Sender<usize>,
    /// The gate calls wait at.
    gate: watch::Sender<Gate>,
}

#[derive(Default)]
struct State {
    fail_next: usize,
    fail_permanently: bool,
    panic_next: usize,
    deliveries: Vec<Delivery>,
    succeeded: Vec<TaskId>,
}

/// The gate: `generation` counts releases, so a call that started waiting
/// before a release passes even if the gate was closed again before it woke.
#[derive(Clone, Copy)]
struct Gate {
    open: bool,
    generation: u64,
}

/// What a call does once past the gate.
enum Outcome {
    Panic,
    FailPermanently,
    Fail,
    Succeed,
}

impl Shared {
    fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            calls: watch::Sender::new(0),
            successes: watch::Sender::new(0),
            blocked: watch::Sender::new(0),
            gate: watch::Sender::new(Gate {
                open: true,
                generation: 0,
            }),
        }
    }

    /// Locks the state; a panic while locked cannot leave it inconsistent,
    /// so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_gate(&self) {
        self.gate.send_modify(|gate| {
            gate.open = true;
            gate.generation = gate.generation.wrapping_add(1);
        });
    }

    /// Waits at the gate if it is closed, counted in `blocked`.
    async fn pass_gate(&self) {
        let mut gate = self.gate.subscribe();
        let entered = *gate.borrow_and_update();
        if entered.open {
            return;
        }
        let _blocked = BlockedGuard::enter(&self.blocked);
        // The sender lives in `self`, so the channel cannot close.
        let _ = gate
            .wait_for(|now| now.open || now.generation != entered.generation)
            .await;
    }
}

/// Counts one waiting call for as long as it lives, so a call dropped while
/// blocked (a handler timeout, say) leaves the count right.
struct BlockedGuard<'a> {
    blocked: &'a watch::Sender<usize>,
}

impl<'a> BlockedGuard<'a> {
    fn enter(blocked: &'a watch::Sender<usize>) -> Self {
        blocked.send_modify(|n| *n += 1);
        Self { blocked }
    }
}

impl Drop for BlockedGuard<'_> {
    fn drop(&mut self) {
        self.blocked.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[async_trait]
impl Handler for MockHandler {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        let id = delivery.id;
        {
            let mut state = self.shared.lock();
            state.deliveries.push(delivery);
            let calls = state.deliveries.len();
            self.shared.calls.send_replace(calls);
        }

        self.shared.pass_gate().await;

        let outcome = {
            let mut state = self.shared.lock();
            if state.panic_next > 0 {
                state.panic_next -= 1;
                Outcome::Panic
            } else if state.fail_permanently {
                Outcome::FailPermanently
            } else if state.fail_next > 0 {
                state.fail_next -= 1;
                Outcome::Fail
            } else {
                state.succeeded.push(id);
                let successes = state.succeeded.len();
                self.shared.successes.send_replace(successes);
                Outcome::Succeed
            }
        };
        // The lock is released here: the panic below must not poison it.

        match outcome {
            Outcome::Panic => panic!("{INJECTED_PANIC}"),
            Outcome::FailPermanently => Err(HandlerError::permanent(anyhow::anyhow!(
                INJECTED_PERMANENT_FAILURE
            ))),
            Outcome::Fail => Err(HandlerError::retryable(anyhow::anyhow!(INJECTED_FAILURE))),
            Outcome::Succeed => Ok(()),
        }
    }
}

impl HandlerHandle {
    /// Makes the next `n` calls return a retryable `"injected failure"` error
    /// (replacing any count still pending).
    pub fn fail_next(&self, n: usize) {
        self.shared.lock().fail_next = n;
    }

    /// Makes every call return a permanent error until [`succeed`](Self::succeed).
    pub fn fail_permanently(&self) {
        self.shared.lock().fail_permanently = true;
    }

    /// Makes the next `n` calls panic with `"injected panic"` (replacing any
    /// count still pending). The panic leaves the handler usable.
    pub fn panic_next(&self, n: usize) {
        self.shared.lock().panic_next = n;
    }

    /// Closes the gate: calls from now on wait until [`release`](Self::release).
    pub fn block(&self) {
        self.shared.gate.send_modify(|gate| gate.open = false);
    }

    /// Opens the gate: every waiting call proceeds, and later calls pass until
    /// the next [`block`](Self::block).
    pub fn release(&self) {
        self.shared.open_gate();
    }

    /// Back to the default: calls succeed and are not blocked.
    ///
    /// Clears pending failures and panics and releases waiting calls; what was
    /// recorded so far is kept.
    pub fn succeed(&self) {
        {
            let mut state = self.shared.lock();
            state.fail_next = 0;
            state.fail_permanently = false;
            state.panic_next = 0;
        }
        self.shared.open_gate();
    }

    /// How many calls entered the handler, whatever their outcome, including
    /// calls still running or blocked.
    pub fn calls(&self) -> usize {
        self.shared.lock().deliveries.len()
    }

    /// Every delivery received, in call order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.lock().deliveries.clone()
    }

    /// The ids of the calls that returned `Ok`, in completion order.
    pub fn succeeded_ids(&self) -> Vec<TaskId> {
        self.shared.lock().succeeded.clone()
    }

    /// How many calls are waiting at the gate right now.
    pub fn blocked(&self) -> usize {
        *self.shared.blocked.borrow()
    }

    /// Resolves once at least `n` calls have entered the handler.
    pub async fn wait_for_calls(&self, n: usize) {
        wait_until(&self.shared.calls, n).await;
    }

    /// Resolves once at least `n` calls are waiting at the gate at the same
    /// time.
    pub async fn wait_for_blocked(&self, n: usize) {
        wait_until(&self.shared.blocked, n).await;
    }

    /// Resolves once at least `n` calls have returned `Ok`.
    pub async fn wait_for_successes(&self, n: usize) {
        wait_until(&self.shared.successes, n).await;
    }
}

/// Waits until the counter behind `sender` reaches `n`.
async fn wait_until(sender: &watch::Sender<usize>, n: usize) {
    let mut counter = sender.subscribe();
    // The sender outlives this borrow, so the channel cannot close.
    let _ = counter.wait_for(|&count| count >= n).await;
}

impl fmt::Debug for MockHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockHandler")
            .field("shared", &self.shared)
            .finish()
    }
}

impl fmt::Debug for HandlerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerHandle")
            .field("shared", &self.shared)
            .finish()
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gate = *self.gate.borrow();
        let state = self.lock();
        f.debug_struct("Shared")
            .field("calls", &state.deliveries.len())
            .field("successes", &state.succeeded.len())
            .field("blocked", &*self.blocked.borrow())
            .field("gate_open", &gate.open)
            .field("fail_next", &state.fail_next)
            .field("fail_permanently", &state.fail_permanently)
            .field("panic_next", &state.panic_next)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::panic::AssertUnwindSafe;

    use diesel_outbox_core::{Task, TaskId};
    use futures_util::FutureExt;

    use super::*;

    fn delivery(id: i64) -> Delivery {
        Delivery::new(TaskId::new(id), 1, Task::new("test.kind", 1, "{}"))
    }

    #[tokio::test]
    async fn recording_succeeds_and_records_in_order() {
        let (mock, handle) = recording();
        mock.handle(delivery(1)).await.unwrap();
        mock.handle(delivery(2)).await.unwrap();

        assert_eq!(handle.calls(), 2);
        assert_eq!(handle.deliveries(), vec![delivery(1), delivery(2)]);
        assert_eq!(handle.succeeded_ids(), vec![TaskId::new(1), TaskId::new(2)]);
        assert_eq!(handle.blocked(), 0);
    }

    #[tokio::test]
    async fn fail_next_fails_exactly_n_calls_then_succeeds() {
        let (mock, handle) = handler();
        handle.fail_next(2);

        for id in 1..=2 {
            let error = mock.handle(delivery(id)).await.unwrap_err();
            assert!(!error.is_permanent());
            assert_eq!(error.to_string(), "injected failure");
        }
        mock.handle(delivery(3)).await.unwrap();
        mock.handle(delivery(4)).await.unwrap();

        assert_eq!(handle.calls(), 4);
        assert_eq!(handle.succeeded_ids(), vec![TaskId::new(3), TaskId::new(4)]);
    }

    #[tokio::test]
    async fn failing_constructor_matches_fail_next() {
        let (mock, handle) = failing(1);
        assert!(mock.handle(delivery(1)).await.is_err());
        assert!(mock.handle(delivery(1)).await.is_ok());
        assert_eq!(handle.succeeded_ids(), vec![TaskId::new(1)]);
    }

    #[tokio::test]
    async fn fail_permanently_until_succeed() {
        let (mock, handle) = failing_permanently();
        for id in 1..=3 {
            let error = mock.handle(delivery(id)).await.unwrap_err();
            assert!(error.is_permanent());
        }
        assert!(handle.succeeded_ids().is_empty());

        handle.succeed();
        mock.handle(delivery(4)).await.unwrap();
        assert_eq!(handle.calls(), 4);
        assert_eq!(handle.succeeded_ids(), vec![TaskId::new(4)]);
    }

    #[tokio::test]
    async fn panic_next_panics_then_the_next_call_works() {
        let (mock, handle) = handler();
        handle.panic_next(1);

        let panic = AssertUnwindSafe(mock.handle(delivery(1)))
            .catch_unwind()
            .await
            .unwrap_err();
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied());
        assert_eq!(message, Some("injected panic"));
        assert_eq!(handle.calls(), 1, "the panicking call is counted");

        mock.handle(delivery(2)).await.unwrap();
        assert_eq!(handle.calls(), 2);
        assert_eq!(handle.deliveries(), vec![delivery(1), delivery(2)]);
        assert_eq!(handle.succeeded_ids(), vec![TaskId::new(2)]);
    }

    #[tokio::test]
    async fn panicking_in_a_spawned_task_is_a_join_panic() {
        let (mock, handle) = panicking(2);
        for id in 1..=2 {
            let mock = mock.clone();
            let error = tokio::spawn(async move { mock.handle(delivery(id)).await })
                .await
                .unwrap_err();
            assert!(error.is_panic());
        }
        mock.handle(delivery(3)).await.unwrap();
        assert_eq!(handle.calls(), 3);
        assert_eq!(handle.succeeded_ids(), vec![TaskId::new(3)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn block_holds_calls_until_release() {
        let (mock, handle) = blocking();
        let calls: Vec<_> = (1..=2)
            .map(|id| {
                let mock = mock.clone();
                tokio::spawn(async move { mock.handle(delivery(id)).await })
            })
            .collect();

        handle.wait_for_blocked(2).await;
        assert_eq!(handle.blocked(), 2);
        assert_eq!(handle.calls(), 2, "blocked calls are counted");
        assert!(handle.succeeded_ids().is_empty());
        assert!(calls.iter().all(|call| !call.is_finished()));

        handle.release();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        handle.wait_for_successes(2).await;
        assert_eq!(handle.blocked(), 0);
        assert_eq!(handle.succeeded_ids().len(), 2);

        // Released: later calls pass straight through until `block` again.
        mock.handle(delivery(3)).await.unwrap();
        handle.block();
        let call = tokio::spawn({
            let mock = mock.clone();
            async move { mock.handle(delivery(4)).await }
        });
        handle.wait_for_blocked(1).await;
        handle.succeed();
        call.await.unwrap().unwrap();
        assert_eq!(handle.succeeded_ids().len(), 4);
    }

    #[tokio::test]
    async fn release_frees_waiters_even_if_blocked_again_at_once() {
        let (mock, handle) = blocking();
        let call = tokio::spawn({
            let mock = mock.clone();
            async move { mock.handle(delivery(1)).await }
        });
        handle.wait_for_blocked(1).await;
        handle.release();
        handle.block();
        call.await.unwrap().unwrap();
        assert_eq!(handle.blocked(), 0);
    }

    #[tokio::test]
    async fn a_blocked_call_dropped_leaves_the_count_right() {
        let (mock, handle) = blocking();
        let call = tokio::spawn({
            let mock = mock.clone();
            async move { mock.handle(delivery(1)).await }
        });
        handle.wait_for_blocked(1).await;
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
        assert_eq!(handle.blocked(), 0);
        assert_eq!(handle.calls(), 1);
    }

    #[tokio::test]
    async fn wait_for_calls_resolves_when_reached() {
        let (mock, handle) = recording();
        // Already reached: resolves at once.
        handle.wait_for_calls(0).await;

        let waiter = tokio::spawn({
            let handle = handle.clone();
            async move { handle.wait_for_calls(3).await }
        });
        for id in 1..=3 {
            mock.handle(delivery(id)).await.unwrap();
        }
        waiter.await.unwrap();
        handle.wait_for_successes(3).await;
        assert_eq!(handle.calls(), 3);
    }

    #[test]
    fn debug_shows_the_counters() {
        let (mock, handle) = failing(2);
        let debug = format!("{mock:?} {handle:?}");
        assert!(debug.contains("fail_next: 2"), "{debug}");
    }
}
