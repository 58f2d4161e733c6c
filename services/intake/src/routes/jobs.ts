import { randomUUID } from "node:crypto";
import {
  ensureJobStreams,
  injectTraceContext,
  isRetryableBusError,
  lastStreamMessage,
  openKv,
  publishToStream,
} from "@zml/bus";
import type { KV, MsgHdrs } from "@zml/bus";
import {
  HEADERS,
  JOB_HEADERS,
  JOB_ID_PATTERN,
  JOB_MESSAGE_TYPE,
  JOB_OUTCOMES,
  JOB_STATUS_BUCKET,
  JOB_STREAMS,
  JobStatusSchema,
  ROUTING_HTTP_HEADER,
  ZmlError,
  backoffDelayMs,
  jobResultSubject,
  jobKey,
  jobSubmitSubject,
  parseRoutingHeader,
} from "@zml/contracts";
import type { AccountSpec } from "@zml/contracts";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import { admit } from "../admission/admit.ts";
import type { IntakeConfig } from "../config.ts";
import type { ClientRouteDeps } from "./deps.ts";
import { AnyObjectSchema, API_KEY, json } from "./docs.ts";
import { routeFieldsOf } from "../request/route-fields.ts";
import { planHeaders, planRoute } from "../request/route-plan.ts";
import { tierGate } from "../admission/tier-gate.ts";
import { parseJsonObject, validate } from "../request/validation.ts";

/** `POST /v1/jobs`: one inference request to run as a batch job. */
export const JobBodySchema = z.strictObject({
  /** Your id for the job (dedupe key: the same id within 10 minutes is one job). */
  job_id: z.string().regex(JOB_ID_PATTERN, "letters, digits, '-' and '_', at most 64").optional(),
  /** The OpenAI endpoint the job calls. */
  path: z.enum(["/v1/chat/completions", "/v1/completions"]).default("/v1/chat/completions"),
  /** The OpenAI request body, exactly as it would be POSTed to `path`. */
  request: z.record(z.string(), z.unknown()),
});

export interface JobRouteDeps extends ClientRouteDeps {
  config: Pick<IntakeConfig, "ZML_JOB_SUBMIT_TIMEOUT_MS">;
}

/**
 * Batch jobs over HTTP: `POST /v1/jobs` validates like a sync request and publishes the job
 * to JetStream (202; JetStream dedupes by job id), `GET /v1/jobs/{id}` answers its status
 * and, once finished, its result. Jobs published directly to JetStream are visible here too.
 */
export function jobRoutes(deps: JobRouteDeps) {
  let ready: Promise<{ status: KV }> | undefined;
  // Streams and the status bucket are looked up on first use, so intake starts without them;
  // a failed look (JetStream unreachable) is forgotten, so the next request tries again.
  const lookUp = () => {
    if (!ready) {
      const attempt = ensureJobStreams(deps.bus).then(async () => ({
        status: await openKv(deps.bus, JOB_STATUS_BUCKET),
      }));
      ready = attempt;
      attempt.catch(() => {
        if (ready === attempt) ready = undefined;
      });
    }
    return ready;
  };
  const setup = () => jobStore(lookUp());

  /**
   * Queues a job, trying again while JetStream is between leaders (a server of the cluster
   * lost: the jobs stream elects a new leader within seconds) until the submission's time
   * is up; then a retryable 503. Each try is safe: JetStream dedupes by the job's message id.
   * A try whose answer was lost may have stored the job, so a later try's `duplicate` is
   * that job itself, not a second submission, and is not reported as one.
   */
  const submit = async (account: string, jobId: string, body: Uint8Array, headers: MsgHdrs) => {
    const deadline = deps.clock() + deps.config.ZML_JOB_SUBMIT_TIMEOUT_MS;
    let mayHaveStored = false;
    for (let attempt = 1; ; attempt++) {
      const left = deadline - deps.clock();
      try {
        await lookUp();
        const ack = await publishToStream(deps.bus, jobSubmitSubject(account, jobId), body, {
          headers,
          msgId: jobKey(account, jobId),
          timeoutMs: Math.max(SUBMIT_MIN_TRY_MS, Math.min(left, SUBMIT_TRY_TIMEOUT_MS)),
        });
        return { duplicate: ack.stored && ack.duplicate && !mayHaveStored };
      } catch (err) {
        if (err instanceof ZmlError) throw err;
        // Lost in flight, or unanswered: JetStream may have it.
        if (!(err instanceof Error) || err.name === "TimeoutError") mayHaveStored = true;
        const pauseMs = backoffDelayMs(SUBMIT_RETRY, attempt);
        if (!isRetryableBusError(err) || deps.clock() + pauseMs >= deadline) throw storeDown();
        await new Promise((r) => setTimeout(r, pauseMs));
      }
    }
  };

  return (app: FastifyInstance) => {
    app.post("/v1/jobs", async (req, reply) => {
      const account = admit(deps, req.headers.authorization, deps.clock());
      // The tier the job's request asks for is authorised before any check of the job's shape.
      const job = validate(JobBodySchema, parseJsonObject(bodyOf(req), jobTierGate(account)));
      const fields = routeFieldsOf(job.path, job.request);
      if (fields.tier === 4) {
        throw new ZmlError(
          "sealed_body_required",
          "tier 4 is end to end and batch jobs are not sealed: use a tier-4 session",
          { param: "request.tier" },
        );
      }
      if (fields.stream || fields.sessionId) {
        throw new ZmlError("invalid_request", "batch jobs cannot stream or use a session", {
          param: "request.stream",
        });
      }
      const plan = planRoute(fields, account, deps.models, deps.policies, "models");
      const jobId = job.job_id ?? `job-${randomUUID().replaceAll("-", "")}`;
      const h = planHeaders(JOB_MESSAGE_TYPE, job.path, fields, plan, account);
      // The bytes the node gets: the request as it was checked, written once.
      const body = Buffer.from(JSON.stringify(job.request));
      const { duplicate } = await submit(account.id, jobId, body, injectTraceContext(h));
      return reply.code(202).send({ object: "job", job_id: jobId, status: "queued", duplicate });
    });

    app.get("/v1/jobs/:id", async (req) => {
      const account = admit(deps, req.headers.authorization, deps.clock());
      const id = (req.params as { id: string }).id;
      const notFound = new ZmlError("not_found", `no job '${id}'`, { param: "id" });
      if (!JOB_ID_PATTERN.test(id)) throw notFound;
      const { status: statusKv } = await setup();
      const entry = await jobStore(statusKv.get(jobKey(account.id, id)));
      const parsed =
        entry?.operation === "PUT" ? JobStatusSchema.safeParse(entry.json()) : undefined;
      const status = parsed?.success ? parsed.data : undefined;
      // Scoped by account already; a status that says otherwise was not written by ZML.
      if (status && status.account !== account.id) throw notFound;
      const readResult = () =>
        jobStore(
          lastStreamMessage(deps.bus, JOB_STREAMS.results, jobResultSubject(account.id, id)),
        );
      const result = await readResult();
      // The status is advisory and its writes are not retried: one lost in a failover can
      // leave a finished job with no status, or still `running`. Its result, the record,
      // then says how it ended.
      if (result && !(status && isOutcome(status.status))) {
        return finishedFromResult(id, result.headers, result.data, status);
      }
      if (!status) {
        // Not pulled by a worker yet: it waits in the work queue under this account's subject.
        const waiting = await jobStore(
          lastStreamMessage(deps.bus, JOB_STREAMS.jobs, jobSubmitSubject(account.id, id)),
        );
        if (!waiting) {
          // Or it finished between the reads above: a worker acks a job (which takes it out
          // of the queue) only once its result is stored, so the result is there now.
          const finished = await readResult();
          if (finished) return finishedFromResult(id, finished.headers, finished.data, undefined);
          throw notFound;
        }
        return {
          object: "job",
          job_id: id,
          status: "queued",
          attempts: 0,
          deliveries: 0,
          reexecutions: 0,
          error_code: null,
          result: null,
        };
      }
      return {
        object: "job",
        job_id: id,
        status: status.status,
        attempts: status.attempts,
        // JetStream's delivery count; a job delivered again does not always run again.
        deliveries: status.deliveries ?? (status.status === "queued" ? 0 : 1),
        // Runs on a node after one whose end nobody recorded (e.g. its dispatcher died).
        reexecutions: status.reexecutions ?? 0,
        error_code: status.error_code,
        updated_at: status.updated_at,
        result: result ? resultView(result.headers, result.data) : null,
      };
    });
  };
}

/** The tier gate on a job: the tiers its `request` asks for (tier 1 when it has none). */
function jobTierGate(account: AccountSpec): (body: object) => void {
  const gate = tierGate(account);
  return (body) => {
    const request = (body as { request?: unknown }).request;
    gate(typeof request === "object" && request !== null && !Array.isArray(request) ? request : {});
  };
}

/** Seconds a client waits before retrying while JetStream elects a new leader (~2–10 s). */
export const JOB_STORE_RETRY_AFTER_S = 2;

/** Pauses between submission tries: short first (an election may just be ending), doubling. */
const SUBMIT_RETRY = { firstMs: 100, maxMs: 1_000 };
/** One try's wait for JetStream's ack; a lost try is followed by another well within the budget. */
const SUBMIT_TRY_TIMEOUT_MS = 2_000;
const SUBMIT_MIN_TRY_MS = 250;

function storeDown(): ZmlError {
  return new ZmlError(
    "bus_unavailable",
    "the job store (JetStream) is briefly unavailable; retry with the same job_id",
    { retryAfterS: JOB_STORE_RETRY_AFTER_S },
  );
}

/**
 * Awaits a JetStream operation of the job routes. Any failure there is JetStream being
 * unreachable or between leaders (a server of the cluster lost, a stream re-electing): the
 * request was valid, so the client gets a retryable 503 with `Retry-After`, never a 500.
 * Resubmitting with the same `job_id` is safe: JetStream dedupes it.
 */
async function jobStore<T>(operation: Promise<T>): Promise<T> {
  try {
    return await operation;
  } catch (err) {
    if (err instanceof ZmlError) throw err;
    throw storeDown();
  }
}

function isOutcome(status: string): boolean {
  return (JOB_OUTCOMES as readonly string[]).includes(status);
}

/**
 * A finished job as its stored result shows it, for a job whose status record was lost or
 * never got past `running`.
 */
function finishedFromResult(
  id: string,
  h: { get(k: string): string },
  data: Uint8Array,
  status: { deliveries?: number | undefined; reexecutions?: number | undefined } | undefined,
) {
  const result = resultView(h, data);
  return {
    object: "job",
    job_id: id,
    status: isOutcome(result.outcome) ? result.outcome : "done",
    attempts: result.routing?.attempts ?? 1,
    // At least the delivery that stored the result; the exact count went with the status.
    deliveries: status?.deliveries ?? 1,
    reexecutions: status?.reexecutions ?? 0,
    error_code: null,
    result,
  };
}

function resultView(h: { get(k: string): string }, data: Uint8Array) {
  const text = Buffer.from(data).toString("utf8");
  const routing = h.get(HEADERS.routing);
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // a streamed job's SSE text stays a string
  }
  return {
    outcome: h.get(JOB_HEADERS.outcome),
    http_status: Number(h.get(HEADERS.status)),
    [ROUTING_HTTP_HEADER]: routing || null,
    routing: routing ? safeRouting(routing) : null,
    body,
  };
}

function safeRouting(header: string) {
  try {
    return parseRoutingHeader(header);
  } catch {
    return null;
  }
}

function bodyOf(req: FastifyRequest): Buffer {
  if (!Buffer.isBuffer(req.body) || req.body.length === 0) {
    throw new ZmlError("invalid_request", "request body is required", { param: "body" });
  }
  return req.body;
}

/** The batch job routes in the OpenAPI document. */
export const jobPaths: ZodOpenApiPathsObject = {
  "/v1/jobs": {
    post: {
      operationId: "createJob",
      tags: ["batch"],
      summary: "Queue a batch job on JetStream",
      description: "The job waits in JetStream until capacity exists; its result is kept.",
      security: API_KEY,
      requestBody: { required: true, content: json(JobBodySchema) },
      responses: {
        "202": {
          description: "Queued (or a duplicate of a queued job id)",
          content: json(AnyObjectSchema),
        },
      },
    },
  },
  "/v1/jobs/{id}": {
    get: {
      operationId: "getJob",
      tags: ["batch"],
      summary: "A job's status and, once finished, its result",
      description: "Only the account that queued the job can read it.",
      security: API_KEY,
      requestParams: { path: z.object({ id: z.string().meta({ description: "The job id" }) }) },
      responses: { "200": { description: "Status and result", content: json(AnyObjectSchema) } },
    },
  },
};
