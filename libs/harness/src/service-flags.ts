/**
 * Node flags every ZML service runs with (the dev launcher, the benchmark; the container
 * image sets the same through NODE_OPTIONS).
 *
 * `--max-semi-space-size=4` (MiB): V8 sizes the young generation from the machine's memory,
 * up to 3 × 16 MiB or more on a large host, and a busy service fills it and keeps it
 * resident. A request's garbage is short-lived, so a small young generation still collects
 * it; measured on the bench (docs/performance.md, "Memory"), about 40 MiB less resident
 * memory per service, with no throughput change the machine could resolve.
 */
export const SERVICE_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=4"];
