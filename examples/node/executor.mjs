// An executor of the mscheduler gateway in JavaScript (Node.js 18 or
// later, no dependencies), checked against the gateway's own OpenAPI
// document: it reads /openapi.json first, and every request it sends and
// every answer it gets must fit the schema the document gives for that
// route, or it stops with the path at fault.
//
//   node executor.mjs BASE_URL COLLECTION EXECUTOR RUNS
//
// It takes runs until it has ended RUNS of them: a run whose params hold
// {"width": n} completes with {"area": n * n}, one whose params hold
// {"fail": "why"} fails without retries. It renews each run every
// renew_every_ms while it works, and prints "<key> <outcome>" per run.

const [base, collection, executor, wanted] = process.argv.slice(2);
if (!base || !collection || !executor || !(Number(wanted) > 0)) {
  console.error("usage: node executor.mjs BASE_URL COLLECTION EXECUTOR RUNS");
  process.exit(2);
}

const doc = await (await fetch(`${base}/openapi.json`)).json();

// schemaAt resolves a $ref of the document.
function schemaAt(s) {
  while (s && s.$ref) {
    s = s.$ref.replace(/^#\//, "").split("/").reduce((o, k) => o[k], doc);
  }
  return s;
}

// check says what of value does not fit schema s, at path; "" if it fits.
// It knows the parts of JSON Schema the document uses for these routes.
function check(value, s, path) {
  s = schemaAt(s);
  if (!s) return "";
  if (s.oneOf) {
    return s.oneOf.some((o) => check(value, o, path) === "") ? "" : `${path}: fits none of oneOf`;
  }
  const types = [].concat(s.type ?? []);
  const typeOf = (v) =>
    v === null ? "null" : Array.isArray(v) ? "array" : Number.isInteger(v) ? "integer" : typeof v;
  const t = typeOf(value);
  if (types.length && !types.some((w) => w === t || (w === "number" && t === "integer"))) {
    return `${path}: ${t}, want ${types.join(" or ")}`;
  }
  if (t === "array" && s.items) {
    for (const [i, v] of value.entries()) {
      const why = check(v, s.items, `${path}[${i}]`);
      if (why) return why;
    }
  }
  if (t === "object") {
    for (const name of s.required ?? []) {
      if (!(name in value)) return `${path}.${name}: required, missing`;
    }
    for (const [name, v] of Object.entries(value)) {
      const p = s.properties?.[name];
      if (!p) {
        if (s.additionalProperties === false) return `${path}.${name}: not in the document`;
        continue;
      }
      const why = check(v, p, `${path}.${name}`);
      if (why) return why;
    }
  }
  return "";
}

// call posts body to a route of the collection, both checked against the
// document, and returns the status and the answer.
async function call(route, body) {
  const op = doc.paths[`/v1/collections/{collection}/${route}`]?.post;
  if (!op) throw new Error(`POST ${route}: not in the document`);
  const asked = check(body, op.requestBody.content["application/json"].schema, `${route} request`);
  if (asked) throw new Error(asked);
  const resp = await fetch(`${base}/v1/collections/${collection}/${route}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await resp.json();
  const documented = op.responses[String(resp.status)];
  if (!documented) throw new Error(`${route}: answered ${resp.status}, which the document does not list`);
  const why = check(answer, documented.content?.["application/json"]?.schema, `${route} ${resp.status}`);
  if (why) throw new Error(why);
  return [resp.status, answer];
}

const session = `node-${process.pid}-${Date.now()}`;
let ended = 0;
while (ended < Number(wanted)) {
  const [status, out] = await call("take", { executor, session, max: 2, wait_ms: 2000 });
  if (status !== 200) throw new Error(`take: ${status} ${JSON.stringify(out)}`);
  await Promise.all(out.runs.map(work));
  ended += out.runs.length;
}

// work runs one run: renewed while it works, then completed or failed.
async function work(run) {
  const renew = setInterval(() => {
    call("renew", { executor, run_ids: [run.run_id] }).catch((err) => console.error(`renew ${run.key}: ${err.message}`));
  }, run.renew_every_ms);
  try {
    await new Promise((done) => setTimeout(done, 50)); // the work
    const params = run.params ?? {};
    const [status, out] = params.fail
      ? await call("fail", { executor, run_id: run.run_id, attempt: run.attempt, error: String(params.fail), retry: false })
      : await call("complete", { executor, run_id: run.run_id, attempt: run.attempt, result: { area: params.width * params.width } });
    if (status !== 200) throw new Error(`end of ${run.key}: ${status} ${JSON.stringify(out)}`);
    console.log(`${run.key} ${out.outcome}`);
  } finally {
    clearInterval(renew);
  }
}
