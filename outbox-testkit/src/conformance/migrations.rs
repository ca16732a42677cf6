//! The embedded migrations: idempotent and reversible.

use crate::TestBackend;

/// Applying twice changes nothing; reverting drops the table; applying
/// again restores it. Run on a current-thread runtime by
/// [`conformance_tests!`](crate::conformance_tests), where diesel's harness
/// alone would panic.
pub async fn migrations_are_idempotent_and_reversible<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    assert!(
        db.migrate().await?.is_empty(),
        "a second run applied something"
    );
    assert_eq!(db.count_tasks().await?, 0);
    let reverted = db.revert().await?;
    assert_eq!(reverted.len(), 1);
    assert!(
        db.count_tasks().await.is_err(),
        "outbox_tasks survived the revert"
    );
    assert_eq!(db.migrate().await?, reverted);
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}
