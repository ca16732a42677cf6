//! Dropping a test database from `Drop`, where no async context is available.

use std::future::Future;

/// Runs `cleanup` to completion on a runtime of its own, in a thread of its
/// own, so it works whether or not the dropping thread is inside a runtime.
/// A failure is reported on stderr: a leftover database must not fail a test
/// that passed.
pub(crate) fn run<F>(cleanup: F)
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let outcome = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(cleanup))
    })
    .join();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => eprintln!("could not drop a test database: {error:#}"),
        Err(_) => eprintln!("could not drop a test database: the cleanup thread panicked"),
    }
}
