/**
 * Node flags the dev launcher and the benchmark start every ZML service with. The container
 * image does not set them (its environment holds only what the services' configs know); an
 * operator passes them with `NODE_OPTIONS` (docs/performance.md, "Memory").
 *
 * `--max-semi-space-size=8` (MiB): V8 sizes the young generation from the machine's memory
 * (semi-spaces of 16 MiB and more on a large host), and a busy service fills it and keeps it
 * resident. Measured on the bench (docs/performance.md, "Memory"): 4 MiB saves the most
 * (intake/dispatcher RSS 183/197 → 160/152 MiB after c16+c64) but doubles GC's share of their
 * CPU (4–7 % → 11 %); 8 MiB keeps GC at its default share (5–7 %) for part of the saving.
 */
export const SERVICE_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=8"];
