"""The DP-MTV build: partition the records into chunks, plan the release, (select), extract, clip,
noise once and write the artifact (``docs/design.md`` §6)."""
