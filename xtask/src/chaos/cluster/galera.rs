//! (to be written)

use super::ClusterCtx;
use crate::chaos::report::Report;

pub(crate) async fn run(ctx: &mut ClusterCtx<'_>, report: &mut Report) -> anyhow::Result<()> {
    let _ = (ctx, report);
    anyhow::bail!("not written yet")
}
