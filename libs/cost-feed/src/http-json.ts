import { PriceSourceError } from "./errors.ts";

/** The fetch the HTTP sources use (the global one; tests hand in the same). */
export type Fetch = typeof globalThis.fetch;

/**
 * GETs a provider's JSON page and maps transport and status failures onto error kinds.
 * Bodies of error answers are not logged: a proxy may echo the request's credentials.
 */
export async function getJson(
  fetchFn: Fetch,
  url: URL,
  what: string,
  init: { headers?: Record<string, string>; signal: AbortSignal; timeoutMs: number },
): Promise<unknown> {
  let res: Response;
  try {
    res = await fetchFn(url, {
      headers: { accept: "application/json", ...init.headers },
      signal: AbortSignal.any([init.signal, AbortSignal.timeout(init.timeoutMs)]),
      redirect: "error",
    });
  } catch (err) {
    throw new PriceSourceError(
      "unavailable",
      `${what} could not be reached (${(err as Error).name})`,
      { cause: err },
    );
  }
  const text = await res.text().catch(() => "");
  if (res.status === 429)
    throw new PriceSourceError("throttled", `${what} throttled the call (HTTP 429)`);
  if (res.status === 401 || res.status === 403) {
    throw new PriceSourceError("auth", `${what} refused the credentials (HTTP ${res.status})`);
  }
  if (!res.ok) throw new PriceSourceError("unavailable", `${what} answered HTTP ${res.status}`);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new PriceSourceError("malformed", `${what} answered something that is not JSON`);
  }
}

/** A next-page link is followed only on the provider's own origin: never to anywhere else. */
export function sameOrigin(link: string, base: URL, what: string): URL {
  const next = URL.canParse(link) ? new URL(link) : undefined;
  if (next?.origin !== base.origin) {
    throw new PriceSourceError("malformed", `${what} sent a next page link off its own origin`);
  }
  return next;
}
