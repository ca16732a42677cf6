//! [`TestNames`]: which outbox a test database holds, chosen by type, so
//! the conformance suite expands once for the default names and once more
//! for a table prefix (`PgTestDb<TenantNames>`).

use std::sync::LazyLock;

use diesel_outbox_sql::Names;

/// The names of the outbox a test database is migrated with and its store
/// runs on.
pub trait TestNames: Send + Sync + 'static {
    /// The names.
    fn names() -> Names;
}

/// The default names (`outbox_tasks`...).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultNames;

impl TestNames for DefaultNames {
    fn names() -> Names {
        Names::default()
    }
}

/// The table prefix of [`TenantNames`].
pub const TENANT_PREFIX: &str = "tenant_";

/// Every table with the prefix [`TENANT_PREFIX`] (`tenant_outbox_tasks`...).
#[derive(Debug, Clone, Copy, Default)]
pub struct TenantNames;

/// One value for the process, so that every caller shares the statements
/// it rendered, as a store's clones do.
static TENANT: LazyLock<Names> = LazyLock::new(|| {
    Names::default()
        .with_table_prefix(TENANT_PREFIX)
        .unwrap_or_else(|error| panic!("{TENANT_PREFIX}: {error}"))
});

impl TestNames for TenantNames {
    /// # Panics
    ///
    /// Never: [`TENANT_PREFIX`] passes the prefix check (tested).
    fn names() -> Names {
        TENANT.clone()
    }
}

/// Expands each test named, an `async fn test<N: TestNames>() ->
/// anyhow::Result<()>` in the invoking module, once on the default names
/// (module `default_names`) and once on tables with a prefix
/// (`tenant_names`, [`TenantNames`]): for tests of what must not change
/// with an outbox's names, such as its statements' plans.
#[macro_export]
macro_rules! each_names {
    ($($test:ident),* $(,)?) => {
        mod default_names {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() -> anyhow::Result<()> {
                    super::$test::<$crate::DefaultNames>().await
                }
            )*
        }
        mod tenant_names {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() -> anyhow::Result<()> {
                    super::$test::<$crate::TenantNames>().await
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_prefix_is_a_valid_one() {
        assert_eq!(TenantNames::names().table_prefix(), TENANT_PREFIX);
        assert!(DefaultNames::names().is_default());
    }
}
