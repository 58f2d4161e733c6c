import { EC2Client, paginateDescribeSpotPriceHistory } from "@aws-sdk/client-ec2";
import type { EC2ClientConfig, SpotPrice } from "@aws-sdk/client-ec2";
import { fromIni, fromTemporaryCredentials } from "@aws-sdk/credential-providers";
import type { CloudAccountSpec, CloudCredentials } from "@zml/contracts";
import { readAwsKeys } from "./credentials.ts";
import { PriceSourceError } from "./errors.ts";
import { perGpuHour } from "./normalise.ts";
import type { PriceProblem, PriceQuote, PriceResult, PriceSource, PriceTarget } from "./types.ts";

export const AWS_SOURCE = "aws:DescribeSpotPriceHistory";

export interface AwsSpotSourceOptions {
  /** EC2 endpoint for every region (a local fake in tests); default: AWS's own per region. */
  endpoint?: string | undefined;
  /** Attempts per call, including the SDK's retries of throttling and 5xx (default 3). */
  maxAttempts?: number;
  /** Items per page (`MaxResults`); default the service's. */
  pageSize?: number | undefined;
}

/** Error codes EC2 answers when it is rate-limiting the caller. */
const THROTTLED = new Set(["RequestLimitExceeded", "Throttling", "ThrottlingException"]);
/** Error codes that mean the credentials are refused, expired or lack the permission. */
const AUTH = new Set([
  "AuthFailure",
  "RequestExpired",
  "ExpiredToken",
  "UnauthorizedOperation",
  "InvalidClientTokenId",
  "SignatureDoesNotMatch",
  "CredentialsProviderError",
]);

/**
 * AWS spot prices through `@aws-sdk/client-ec2`: one paginated `DescribeSpotPriceHistory`
 * per region of the account's nodes, filtered by their instance types, the account's
 * product description and (when every node names one) their availability zones, starting
 * now so that each zone's current price comes back. A node with a zone takes that zone's
 * price; one without takes the highest of the region's zones (never underestimated).
 *
 * IAM: `ec2:DescribeSpotPriceHistory` (docs/cost-feed.md).
 */
export function createAwsSpotSource(options: AwsSpotSourceOptions = {}): PriceSource {
  return {
    async fetch(account, targets, signal) {
      const credentials = await credentialsFor(account.credentials);
      const byRegion = new Map<string, PriceTarget[]>();
      for (const t of targets) byRegion.set(t.region, [...(byRegion.get(t.region) ?? []), t]);
      const result: PriceResult = { quotes: [], problems: [] };
      for (const [region, inRegion] of byRegion) {
        const client = new EC2Client({
          region,
          credentials,
          maxAttempts: options.maxAttempts ?? 3,
          ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
        });
        try {
          const part = await regionPrices(client, account, inRegion, options.pageSize, signal);
          result.quotes.push(...part.quotes);
          result.problems.push(...part.problems);
        } finally {
          client.destroy();
        }
      }
      return result;
    },
  };
}

type AwsCredentialSource = NonNullable<EC2ClientConfig["credentials"]>;

async function credentialsFor(ref: CloudCredentials): Promise<AwsCredentialSource> {
  switch (ref.kind) {
    case "secret_file": {
      const keys = await readAwsKeys(ref.path);
      const identity = {
        accessKeyId: keys.access_key_id,
        secretAccessKey: keys.secret_access_key,
        ...(keys.session_token === undefined ? {} : { sessionToken: keys.session_token }),
        ...(keys.expiration === undefined ? {} : { expiration: new Date(keys.expiration) }),
      };
      if (identity.expiration !== undefined && identity.expiration.getTime() <= Date.now()) {
        throw new PriceSourceError("auth", `the keys in ${ref.path} expired at ${keys.expiration}`);
      }
      return () => Promise.resolve(identity);
    }
    case "profile":
      return fromIni({ profile: ref.profile });
    case "role":
      return fromTemporaryCredentials({
        params: {
          RoleArn: ref.role_arn,
          RoleSessionName: "zml-cost-feed",
          ...(ref.external_id === undefined ? {} : { ExternalId: ref.external_id }),
        },
      });
    case "none":
      throw new PriceSourceError("credentials", "aws accounts need credentials");
  }
}

async function regionPrices(
  client: EC2Client,
  account: CloudAccountSpec,
  targets: PriceTarget[],
  pageSize: number | undefined,
  signal: AbortSignal,
): Promise<PriceResult> {
  const problems: PriceProblem[] = [];
  let asked = targets;
  // An unknown instance type fails the whole call (InvalidParameterValue); it is taken out
  // and the call made again, so one typo does not cost the other nodes their prices.
  for (;;) {
    if (asked.length === 0) return { quotes: [], problems };
    try {
      const items = await describe(client, account, asked, pageSize, signal);
      return { quotes: pick(items, asked, problems), problems };
    } catch (err) {
      const bad = unknownInstanceType(err);
      if (bad === undefined || !asked.some((t) => t.instanceType === bad)) throw classify(err);
      for (const t of asked.filter((t) => t.instanceType === bad)) {
        problems.push({
          nodeId: t.nodeId,
          error: new PriceSourceError(
            "unknown_instance_type",
            `EC2 does not know instance type ${bad}`,
          ),
        });
      }
      asked = asked.filter((t) => t.instanceType !== bad);
    }
  }
}

async function describe(
  client: EC2Client,
  account: CloudAccountSpec,
  targets: PriceTarget[],
  pageSize: number | undefined,
  signal: AbortSignal,
): Promise<SpotPrice[]> {
  const zones = targets.map((t) => t.zone);
  const allZoned = zones.every((z) => z !== undefined);
  const pages = paginateDescribeSpotPriceHistory(
    { client, ...(pageSize === undefined ? {} : { pageSize }) },
    {
      InstanceTypes: [...new Set(targets.map((t) => t.instanceType))] as never,
      ProductDescriptions: [account.product_description],
      StartTime: new Date(),
      ...(allZoned
        ? { Filters: [{ Name: "availability-zone", Values: [...new Set(zones)] }] }
        : {}),
    },
  );
  const items: SpotPrice[] = [];
  for await (const page of pages) {
    if (signal.aborted) throw new PriceSourceError("unavailable", "refresh cancelled");
    items.push(...(page.SpotPriceHistory ?? []));
  }
  return items;
}

/** The current price per GPU-hour of each target among the history items. */
function pick(items: SpotPrice[], targets: PriceTarget[], problems: PriceProblem[]): PriceQuote[] {
  // Latest item per (type, zone): the history may hold several per zone.
  const latest = new Map<string, SpotPrice>();
  for (const item of items) {
    const key = `${item.InstanceType} ${item.AvailabilityZone}`;
    const prior = latest.get(key);
    if (!prior || (item.Timestamp?.getTime() ?? 0) > (prior.Timestamp?.getTime() ?? 0))
      latest.set(key, item);
  }
  const quotes: PriceQuote[] = [];
  for (const t of targets) {
    const candidates = [...latest.values()].filter(
      (i) =>
        i.InstanceType === t.instanceType &&
        (t.zone === undefined
          ? i.AvailabilityZone?.startsWith(t.region)
          : i.AvailabilityZone === t.zone),
    );
    if (candidates.length === 0) {
      problems.push({
        nodeId: t.nodeId,
        error: new PriceSourceError(
          "not_found",
          `no spot price for ${t.instanceType} in ${t.zone ?? t.region}`,
        ),
      });
      continue;
    }
    try {
      let best: { price: number; item: SpotPrice } | undefined;
      for (const item of candidates) {
        const price = perGpuHour(
          item.SpotPrice,
          t.gpusPerInstance,
          `${t.instanceType} in ${item.AvailabilityZone}`,
        );
        if (!best || price > best.price) best = { price, item };
      }
      quotes.push({
        nodeId: t.nodeId,
        usdPerGpuHour: best!.price,
        quotedAt: best!.item.Timestamp?.getTime(),
        source: AWS_SOURCE,
      });
    } catch (err) {
      problems.push({ nodeId: t.nodeId, error: classify(err) });
    }
  }
  return quotes;
}

function unknownInstanceType(err: unknown): string | undefined {
  if (!(err instanceof Error) || err.name !== "InvalidParameterValue") return undefined;
  return /Invalid value '([^']+)' for InstanceType/.exec(err.message)?.[1];
}

/** The SDK's error (its `name` is EC2's error code) as a {@link PriceSourceError}. */
function classify(err: unknown): PriceSourceError {
  if (err instanceof PriceSourceError) return err;
  const name = err instanceof Error ? err.name : "Error";
  const message = err instanceof Error ? err.message : String(err);
  if (THROTTLED.has(name))
    return new PriceSourceError("throttled", `EC2 throttled the call (${name})`, { cause: err });
  if (AUTH.has(name))
    return new PriceSourceError("auth", `EC2 refused the credentials (${name}: ${message})`, {
      cause: err,
    });
  const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
  // The SDK's XML parser fails on an answer that is not EC2's XML.
  if (
    /deserializ|xml|parse|Unexpected|char/i.test(`${name} ${message}`) &&
    (status === undefined || status < 300)
  ) {
    return new PriceSourceError(
      "malformed",
      `EC2 answer could not be read (${message.slice(0, 200)})`,
      { cause: err },
    );
  }
  return new PriceSourceError(
    "unavailable",
    `EC2 call failed (${name}${status ? ` HTTP ${status}` : ""}: ${message.slice(0, 200)})`,
    { cause: err },
  );
}
