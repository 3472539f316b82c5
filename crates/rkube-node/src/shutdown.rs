//! A shutdown signal shared by the agent's tasks (a `watch` channel that flips once).

use tokio::sync::watch;

/// The sending half: [`Trigger::fire`] stops every task holding the matching [`Shutdown`].
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// The receiving half; clone one into each task.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new, unfired signal.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    /// Fires the signal (idempotent).
    pub fn fire(&self) {
        let _ = self.0.send(true);
    }

    /// Another receiver.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown(self.0.subscribe())
    }
}

impl Shutdown {
    /// Whether it has fired.
    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once fired (or once the trigger is dropped).
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|fired| *fired).await;
    }
}
