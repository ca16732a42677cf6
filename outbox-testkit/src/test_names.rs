//! [`TestNames`]: which outbox a test database holds, chosen by type, so
//! the conformance suite expands once for the default names and once more
//! for other names (`PgTestDbNamed<SchemaTenantNames>`,
//! `MysqlTestDbNamed<TenantNames>`).

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

/// The schema of [`SchemaTenantNames`].
pub const TENANT_SCHEMA: &str = "tenant";

/// Every table in the schema [`TENANT_SCHEMA`], with the prefix
/// [`TENANT_PREFIX`] (`"tenant".tenant_outbox_tasks`...): both renamings
/// at once, for a backend whose test databases each hold a schema of their
/// own (PostgreSQL; a MySQL schema is a database, shared by the server's
/// tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct SchemaTenantNames;

static SCHEMA_TENANT: LazyLock<Names> = LazyLock::new(|| {
    TENANT
        .clone()
        .with_schema(TENANT_SCHEMA)
        .unwrap_or_else(|error| panic!("{TENANT_SCHEMA}: {error}"))
});

impl TestNames for SchemaTenantNames {
    /// # Panics
    ///
    /// Never: [`TENANT_SCHEMA`] passes the schema check (tested).
    fn names() -> Names {
        SCHEMA_TENANT.clone()
    }
}

/// Expands each test named, an `async fn test<N: TestNames>() ->
/// anyhow::Result<()>` in the invoking module, once on the default names
/// (module `default_names`) and once on other names (`tenant_names`:
/// [`TenantNames`], or the type given as `names = Type;` before the tests):
/// for tests of what must not change with an outbox's names, such as its
/// statements' plans.
#[macro_export]
macro_rules! each_names {
    ($($test:ident),* $(,)?) => {
        $crate::each_names!(names = $crate::TenantNames; $($test),*);
    };
    (names = $names:ty; $($test:ident),* $(,)?) => {
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
                    super::$test::<$names>().await
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
        let names = SchemaTenantNames::names();
        assert_eq!(names.schema(), Some(TENANT_SCHEMA));
        assert_eq!(names.table_prefix(), TENANT_PREFIX);
    }
}
