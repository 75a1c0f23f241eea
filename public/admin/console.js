// The operations console: cron health, queue telemetry, stuck work with redrive and delete,
// flags and the audit log, read from the admin API with the browser's __session cookie and
// refreshed every refreshMs: a finite whole number of milliseconds from MIN_REFRESH_MS to
// MAX_REFRESH_MS, anything else (Infinity, 1e300, -5, NaN, 0x10...) the default — a link can
// set it, and each refresh reads five admin APIs. A refresh never starts while another runs: the
// next tick is timed from the end of the last, and a button pressed meanwhile waits for it. Everything from the API is written with textContent:
// dead-letter payloads and errors carry feed content and must never become markup. No inline
// script or style anywhere (the pages' Content-Security-Policy allows neither): a bar's height is
// set through the element's style object, which the policy leaves alone.

export const MIN_REFRESH_MS = 1000;
export const MAX_REFRESH_MS = 3_600_000;
export const DEFAULT_REFRESH_MS = 10_000;

/** The refresh interval a URL's `refreshMs` asks for, or the default when it is not a whole
 * number of milliseconds within [MIN_REFRESH_MS, MAX_REFRESH_MS] written in decimal. */
export function refreshInterval(asked) {
  const text = String(asked ?? '').trim();
  const value = /^[0-9]{1,7}$/.test(text) ? Number(text) : NaN;
  return Number.isInteger(value) && value >= MIN_REFRESH_MS && value <= MAX_REFRESH_MS ? value : DEFAULT_REFRESH_MS;
}

const SOURCES_NOTE = {
  queue: 'queue message dead-lettered after its last delivery',
  ledger: 'AI ledger entry on the Redis retry DLQ',
  metering: 'metering outbox row out of attempts',
};

class ApiFailure extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
  }
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    credentials: 'same-origin',
    ...options,
    headers: { accept: 'application/json', ...(options.body ? { 'content-type': 'application/json' } : {}) },
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiFailure(response.status, body);
  return body;
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name === 'dataset') Object.assign(node.dataset, value);
    else if (name === 'style') Object.assign(node.style, value);
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const when = (iso) => (iso ? new Date(iso).toLocaleString() : '–');
const pill = (text, kind = text) => el('span', { class: `pill ${kind}` }, text);

function ago(iso) {
  if (!iso) return 'never';
  const seconds = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
  if (seconds < 90) return `${seconds} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

function durationBars(runs) {
  const recent = runs.slice(0, 20).reverse();
  const longest = Math.max(1, ...recent.map((run) => run.durationMs || 0));
  return el(
    'div',
    { class: 'bars', title: recent.map((run) => `${run.status} ${run.durationMs ?? '?'} ms`).join('\n') },
    recent.map((run) =>
      el('span', { class: run.status, style: { height: `${Math.max(2, Math.round(((run.durationMs || 0) / longest) * 28))}px` } }),
    ),
  );
}

function renderCrons(root, jobs) {
  root.replaceChildren(
    ...jobs.map((job) => {
      const last = job.runs[0];
      const lastError = job.runs.find((run) => run.error);
      return el(
        'tr',
        { class: job.stale ? 'stale' : '', dataset: { job: job.name, stale: String(job.stale) } },
        el('td', {}, el('span', { class: 'job-name' }, job.name), ' ', job.stale ? pill('stale') : null, el('br'),
          el('code', {}, job.path)),
        el('td', {}, el('code', {}, job.schedule)),
        el('td', {}, last ? `${ago(last.startedAt)} (${last.trigger})` : 'never'),
        el('td', { dataset: { testid: `cron-status-${job.name}` } }, last ? pill(last.status) : '–'),
        el('td', {}, durationBars(job.runs)),
        el('td', {}, ago(job.lastSuccessAt)),
        el('td', { class: 'error-text' }, lastError ? lastError.error : ''),
      );
    }),
  );
}

function renderTopics(root, notes, health) {
  const cards = health.topics.map((topic) =>
    el(
      'div',
      { class: 'card', dataset: { topic: topic.topic } },
      el('h3', {}, topic.topic, ' ', el('code', {}, topic.wireTopic)),
      el(
        'dl',
        {},
        ['published', 'deliveries', 'successes', 'retries', 'deadLetters', 'rejected'].flatMap((key) => [
          el('dt', {}, key),
          el('dd', { dataset: { counter: key } }, topic[key]),
        ]),
        el('dt', {}, 'last success'),
        el('dd', {}, ago(topic.lastSuccessAt)),
        el('dt', {}, 'last failure'),
        el('dd', {}, ago(topic.lastFailureAt)),
        el('dt', {}, 'delivery age'),
        el('dd', {}, topic.lastDeliveryAgeMs === null ? '–' : `${(topic.lastDeliveryAgeMs / 1000).toFixed(1)} s`),
      ),
      topic.lastError ? el('div', { class: 'error' }, topic.lastError) : null,
    ),
  );
  const ledger = health.aiLedgerRetry;
  const outbox = health.meteringOutbox;
  cards.push(
    el('div', { class: 'card' }, el('h3', {}, 'AI ledger retry (Redis)'),
      ledger
        ? el('dl', {}, Object.entries(ledger).flatMap(([key, value]) => [el('dt', {}, key), el('dd', {}, value)]))
        : el('p', { class: 'empty' }, 'Redis not configured')),
    el('div', { class: 'card' }, el('h3', {}, 'Metering outbox'),
      el('dl', {}, Object.entries(outbox).flatMap(([key, value]) => [el('dt', {}, key), el('dd', {}, value)]))),
  );
  root.replaceChildren(...cards);
  const pipeline = health.pipeline;
  notes.textContent = `Pipeline flag ${pipeline.enabled ? 'on' : 'off'} · queue ${
    pipeline.provisioned ? `provisioned (${pipeline.region || 'default region'})` : 'not provisioned'
  }. The queue service reports no depth; "delivery age" is how old the last delivered message was.`;
}

// The streams' change path (GET /api/admin/streams): who detects changes in Postgres, how far
// positions have got, what is waiting for one, and who listens.
function renderChangePath(root, path) {
  const detector = path.detector;
  const lag = path.lag;
  const stalled = lag.unpositioned > 0 && !detector;
  const card = (title, rows, attributes = {}) =>
    el('div', { class: 'card', ...attributes }, el('h3', {}, title),
      el('dl', {}, rows.flatMap(([key, value]) => [el('dt', {}, key), el('dd', { dataset: { field: key } }, value)])));
  root.replaceChildren(
    card('Detector', [
      ['bus', path.bus || 'none: streams poll'],
      ['process', detector ? `${detector.process} (${detector.tag})` : 'none'],
      ['since', detector ? ago(detector.since) : '–'],
      ['last position', path.lastPosition],
    ]),
    card('Lag', [
      ['without a position', lag.unpositioned],
      ['oldest', lag.oldestAgeS === null ? '–' : `${lag.oldestAgeS.toFixed(1)} s`],
      ['status', stalled ? 'stalled: no detector' : 'ok'],
    ], { dataset: { stalled: String(stalled) } }),
    card('Listeners', [
      ['subscribed processes', path.subscribedProcesses],
      ...Object.entries(path.openStreamsByTenant).slice(0, 8).map(([tenant, count]) => [`streams of ${tenant}`, count]),
    ]),
  );
}

function renderDeadLetters(state, body) {
  const { root } = state;
  state.count.textContent = String(body.entries.length) + (body.nextCursor ? '+' : '');
  const unavailable = Object.entries(body.unavailable || {});
  state.unavailable.textContent = unavailable.map(([source, why]) => `${source} unavailable: ${why}`).join(' · ');
  if (!body.entries.length) {
    root.replaceChildren(el('tr', {}, el('td', { colspan: 7, class: 'empty' }, 'Nothing is stuck.')));
    return;
  }
  root.replaceChildren(
    ...body.entries.map((entry) => {
      const key = `${entry.source}:${entry.id}`;
      return el(
        'tr',
        { dataset: { entry: key } },
        el('td', {}, el('input', {
          type: 'checkbox', 'aria-label': `select ${key}`, checked: state.selected.has(key),
          onchange: (event) => (event.target.checked ? state.selected.add(key) : state.selected.delete(key)),
        })),
        el('td', { title: SOURCES_NOTE[entry.source] }, entry.source),
        el('td', {}, el('code', {}, entry.id)),
        el('td', {}, when(entry.failedAt)),
        el('td', {}, entry.attempts ?? '–'),
        el('td', { class: 'error-text' }, entry.error || ''),
        el('td', {}, el('details', {}, el('summary', {}, 'show'),
          el('pre', {}, JSON.stringify(entry.payload, null, 2)))),
      );
    }),
  );
}

function renderFlags(root, flags, onChange) {
  if (flags === null) {
    root.replaceChildren(el('p', { class: 'empty', dataset: { testid: 'flags-restricted' } },
      'Flags can be changed by super_admin only.'));
    return;
  }
  const overrideForm = (flag) => {
    const tenant = el('input', { placeholder: 'tenant scope id', 'aria-label': `${flag.key} tenant`, size: 16 });
    const enabled = el('select', { 'aria-label': `${flag.key} override value` },
      el('option', { value: 'true' }, 'on'), el('option', { value: 'false' }, 'off'));
    return el('span', {}, tenant, enabled, el('button', {
      type: 'button',
      onclick: () => tenant.value.trim() &&
        onChange({ key: flag.key, tenantScopeId: tenant.value.trim(), enabled: enabled.value === 'true' }),
    }, 'add override'));
  };
  root.replaceChildren(
    el('table', { class: 'flags' },
      el('thead', {}, el('tr', {}, el('th', {}, 'Flag'), el('th', {}, 'Global'), el('th', {}, 'Tenant overrides'))),
      el('tbody', {}, flags.map((flag) =>
        el('tr', { dataset: { flag: flag.key } },
          el('td', {}, el('strong', {}, flag.label), el('br'), el('code', {}, flag.key), el('br'),
            el('span', { class: 'result' }, flag.description)),
          el('td', {}, el('label', {}, el('input', {
            type: 'checkbox', checked: flag.enabled, 'aria-label': `${flag.key} enabled`,
            onchange: (event) => onChange({ key: flag.key, enabled: event.target.checked }),
          }), flag.enabled ? ' on' : ' off')),
          el('td', {},
            Object.entries(flag.overrides).map(([tenant, value]) => el('div', {},
              el('code', {}, tenant), ` ${value ? 'on' : 'off'} `,
              el('button', { type: 'button', onclick: () => onChange({ key: flag.key, tenantScopeId: tenant, clearOverride: true }) }, 'clear'))),
            overrideForm(flag)),
        ))),
    ),
  );
}

function renderAudit(root, entries) {
  if (!entries.length) {
    root.replaceChildren(el('tr', {}, el('td', { colspan: 7, class: 'empty' }, 'No operator actions yet.')));
    return;
  }
  root.replaceChildren(
    ...entries.map((entry) =>
      el('tr', { dataset: { audit: entry.id } },
        el('td', {}, when(entry.at)),
        el('td', {}, el('code', {}, entry.actor)),
        el('td', {}, entry.action),
        el('td', {}, entry.source),
        el('td', {}, el('code', {}, entry.targetIds.join(', '))),
        el('td', {}, entry.reason || ''),
        el('td', {}, Array.isArray(entry.outcome)
          ? entry.outcome.map((item) => `${item.id}: ${item.outcome}`).join(', ')
          : JSON.stringify(entry.outcome)),
      ),
    ),
  );
}

export function startConsole(doc, { refreshMs = DEFAULT_REFRESH_MS } = {}) {
  const $ = (id) => doc.querySelector(`[data-testid="${id}"]`);
  const deadLetters = {
    root: $('dead-letters'), count: $('dead-letter-count'), unavailable: $('dead-letters-unavailable'),
    selected: new Set(), visible: [],
  };

  function show(view) {
    for (const id of ['console', 'restricted', 'signed-out']) $(id).hidden = id !== view;
  }

  // One refresh at a time: a call while one runs gets one more after it (shared by all callers).
  let running = null;
  let again = null;
  function refresh() {
    if (running) {
      again ||= running.catch(() => {}).then(() => {
        again = null;
        return refresh();
      });
      return again;
    }
    running = readEverything().finally(() => {
      running = null;
    });
    return running;
  }

  async function readEverything() {
    let health;
    try {
      health = await api('/api/admin/queues');
    } catch (error) {
      show(error.status === 401 ? 'signed-out' : error.status === 403 ? 'restricted' : 'console');
      if (error.status === 401 || error.status === 403) return;
      throw error;
    }
    show('console');
    const source = $('dead-letter-source').value;
    const [crons, stuck, flags, audit, changePath] = await Promise.all([
      api('/api/admin/crons'),
      api(`/api/admin/dead-letters?limit=100${source ? `&source=${source}` : ''}`),
      api('/api/admin/flags').catch((error) => (error.status === 403 ? { flags: null } : Promise.reject(error))),
      api('/api/admin/audit?limit=50'),
      api('/api/admin/streams'),
    ]);
    renderCrons($('crons'), crons.jobs);
    renderTopics($('topics'), $('queue-notes'), health);
    renderChangePath($('change-path'), changePath);
    deadLetters.visible = stuck.entries.map((entry) => `${entry.source}:${entry.id}`);
    for (const key of [...deadLetters.selected]) if (!deadLetters.visible.includes(key)) deadLetters.selected.delete(key);
    renderDeadLetters(deadLetters, stuck);
    renderFlags($('flags'), flags.flags, changeFlag);
    renderAudit($('audit'), audit.entries);
    $('last-refreshed').textContent = new Date().toLocaleTimeString();
    $('last-refreshed').dateTime = new Date().toISOString();
  }

  async function changeFlag(update) {
    try {
      await api('/api/admin/flags', { method: 'PUT', body: JSON.stringify(update) });
    } catch (error) {
      $('action-result').textContent = `Flag change refused: ${error.message}`;
    }
    await refresh();
  }

  async function act(action) {
    const chosen = [...deadLetters.selected];
    if (!chosen.length) {
      $('action-result').textContent = 'Select entries first.';
      return;
    }
    let reason = null;
    if (action === 'delete') {
      reason = prompt(`Delete ${chosen.length} entr${chosen.length === 1 ? 'y' : 'ies'} for good? Give a reason:`);
      if (!reason || !reason.trim()) return;
    } else if (!confirm(`Redrive ${chosen.length} entr${chosen.length === 1 ? 'y' : 'ies'}?`)) {
      return;
    }
    const bySource = new Map();
    for (const key of chosen) {
      const [source, ...rest] = key.split(':');
      bySource.set(source, [...(bySource.get(source) || []), rest.join(':')]);
    }
    const lines = [];
    for (const [source, ids] of bySource) {
      try {
        const body = await api('/api/admin/dead-letters', {
          method: 'POST', body: JSON.stringify({ action, source, ids, ...(reason ? { reason } : {}) }),
        });
        lines.push(...body.results.map((result) => `${source}:${result.id} ${result.outcome}`));
      } catch (error) {
        lines.push(`${source}: ${error.message}`);
      }
    }
    deadLetters.selected.clear();
    $('action-result').textContent = lines.join(' · ');
    await refresh();
  }

  $('select-all').addEventListener('change', (event) => {
    deadLetters.selected = new Set(event.target.checked ? deadLetters.visible : []);
    for (const box of deadLetters.root.querySelectorAll('input[type=checkbox]')) box.checked = event.target.checked;
  });
  $('redrive-selected').addEventListener('click', () => act('redrive'));
  $('delete-selected').addEventListener('click', () => act('delete'));
  $('dead-letter-source').addEventListener('change', refresh);
  $('refresh-now').addEventListener('click', refresh);

  const interval = refreshInterval(refreshMs);
  const tick = () => refresh()
    .catch((error) => {
      $('last-refreshed').textContent = `failed (${error.message}); retrying`;
    })
    .finally(() => setTimeout(tick, interval));
  tick();
}
