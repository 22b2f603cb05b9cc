//! Tests that need a glommio executor: runs an async block on a fresh `LocalExecutor`
//! thread and returns its result (a panic in it fails the calling test).

/// Runs `f` to completion on a new glommio executor.
pub(crate) fn run<T: Send + 'static>(f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move { f().await })
        .unwrap()
        .join()
        .unwrap()
}
