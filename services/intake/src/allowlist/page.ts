// The human allowlist page: static HTML that renders `GET /v1/attestation` and follows its
// event stream, so a status change shows without a reload. Data is set as text, never HTML.
export const ALLOWLIST_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ZML tier 3–4 allowlist</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 2rem; color: #1a1a1a; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid #ddd; vertical-align: top; }
  code { font-size: 12px; word-break: break-all; }
  .status { font-weight: 600; }
  .attested { color: #0a7a2f; } .revoked { color: #b00020; }
  .expired { color: #8a6d00; } .failing { color: #b35c00; }
  #live { color: #666; }
</style>
</head>
<body>
<h1>Tier 3–4 allowlist</h1>
<p>Hardware-attested (Intel TDX) nodes and their current attestation status. Each node's quote
binds the verifier's nonce and the node's TLS key; the raw quote is at
<code>/v1/attestation/{node_id}</code>. Machine-readable: <a href="/v1/attestation">/v1/attestation</a>.</p>
<p id="live">connecting…</p>
<table>
<thead><tr><th>Node</th><th>Tier</th><th>Models</th><th>Family</th><th>Status</th>
<th>Measurement</th><th>TCB</th><th>Attested at</th><th>Valid until</th></tr></thead>
<tbody id="nodes"></tbody>
</table>
<script>
(() => {
  const body = document.getElementById("nodes");
  const live = document.getElementById("live");
  const cell = (row, text, cls) => {
    const td = row.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  };
  const render = (list) => {
    body.replaceChildren();
    for (const n of list.nodes) {
      const row = body.insertRow();
      row.dataset.nodeId = n.node_id;
      row.dataset.status = n.status;
      cell(row, n.node_id);
      cell(row, String(n.tier));
      cell(row, n.models.join(", "));
      cell(row, n.accelerator_family);
      const status = cell(row, n.status + (n.reason ? " — " + n.reason : ""), "status " + n.status);
      status.dataset.field = "status";
      const m = cell(row, "");
      if (n.measurement) {
        for (const k of ["mrtd", "rtmr0", "rtmr1", "rtmr2", "rtmr3"]) {
          const line = document.createElement("div");
          const code = document.createElement("code");
          code.textContent = k + " " + n.measurement[k];
          line.append(code);
          m.append(line);
        }
      } else m.textContent = "—";
      cell(row, n.tcb_status ?? "—");
      cell(row, n.attested_at ?? "—");
      cell(row, n.valid_until ?? "—");
    }
    live.textContent = "updated " + list.generated_at;
  };
  let polling;
  const poll = () => {
    if (polling) return;
    polling = setInterval(async () => {
      try { render(await (await fetch("/v1/attestation", { cache: "no-store" })).json()); }
      catch { live.textContent = "offline, retrying…"; }
    }, 1000);
  };
  if (!("EventSource" in window)) return poll();
  const events = new EventSource("/v1/attestation");
  events.addEventListener("allowlist", (e) => render(JSON.parse(e.data)));
  events.onerror = () => { live.textContent = "reconnecting…"; };
})();
</script>
</body>
</html>
`;
