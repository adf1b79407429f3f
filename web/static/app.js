// Sluice console: plain JavaScript over the public Connect API (JSON).
// Everything is rendered with textContent, never innerHTML, so nothing a
// tenant stores (rule names, client ids) can run as markup.
'use strict';

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

const state = { key: '', role: '', tenantId: '', tenants: [], tiers: [], auditBefore: 0, rules: [], ovToken: '', ovExpiresAt: '', timer: null, view: 'rules' };

const ALGORITHM_HELP = {
  ALGORITHM_TOKEN_BUCKET: 'A bucket holds up to "burst" tokens (the limit when 0) and refills at limit per window. Each request takes one token: short bursts pass, the average rate is held. With a warm-up, a bucket idle for long admits "cold factor" times slower at first and reaches the full rate over the warm-up.',
  ALGORITHM_GCRA: 'Generic cell rate: requests are spaced evenly at limit per window, with "burst" extra allowed at once. Smooth, exact, and one number of state.',
  ALGORITHM_LEAKY_BUCKET: 'A queue draining at limit per window: a request that would exceed the rate waits (up to "max delay") instead of being rejected.',
  ALGORITHM_FIXED_WINDOW: 'At most limit requests per window (each window starts on the clock: on the minute, the hour). Simple; a client can send twice the limit around a window edge. With a calendar window, a quota per calendar day, week, month or year that starts afresh at midnight, on the Monday, the 1st or January 1st, in UTC or in the time zone you choose (a day when clocks change lasts 23 or 25 hours).',
  ALGORITHM_SLIDING_LOG: 'Exactly limit requests in any window-long period, counting each request\'s time. Exact, but keeps one entry per request.',
  ALGORITHM_SLIDING_WINDOW: 'Approximately limit requests in any window-long period: the previous window\'s count weighted by its overlap. Cheap and close.',
  ALGORITHM_SLIDING_BUCKETS: 'Limit requests in any window-long period, counted in sub-windows of the bucket width (which must divide the window): the finer, the more exact.',
  ALGORITHM_CONCURRENCY: 'At most limit requests in flight at once; each holds a lease until released or until its lease lifetime ends (the proxy and the Go middleware release it when the request ends). No window.',
  ALGORITHM_ADAPTIVE_CONCURRENCY: 'Requests in flight, to a limit the fleet finds by itself: every window it compares the latency the backend shows with its latency without load, and lowers the limit as requests queue or are dropped, between the floor and the limit. The proxy measures each request; check callers report the latency and outcome on release.',
};

// el builds an element: el('td', {class: 'x'}, 'text', child, ...).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v === true) e.setAttribute(k, '');
    else if (v !== false && v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? '')));
  return e;
}

function say(msg) { $('#status').textContent = msg; }

// fieldsOf reads the google.rpc.BadRequest field violations of an error.
function fieldsOf(body) {
  const out = [];
  for (const d of body.details || []) {
    for (const f of (d.debug && d.debug.fieldViolations) || []) out.push({ field: f.field || '', description: f.description || '' });
  }
  return out;
}

// Calls that name no tenant: the operator's own, and a tenant file's apply
// and an import (the file names its tenant, or the import its slug).
const TENANT_FREE = new Set(['TenantService', 'DeciderService', 'TenantFileService/ApplyTenantFile', 'TenantFileService/ImportConfig']);

async function api(service, method, body = {}) {
  const free = TENANT_FREE.has(service) || TENANT_FREE.has(`${service}/${method}`);
  if (state.role === 'operator' && !free && !('tenantId' in body)) body = { tenantId: state.tenantId, ...body };
  const res = await fetch(`/sluice.v1.${service}/${method}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + state.key },
    body: JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(data.message || res.statusText);
    err.code = data.code || String(res.status);
    err.fields = fieldsOf(data);
    throw err;
  }
  return data;
}

// showErrors puts each field error next to its input in form; what has no
// place goes to fallback.
function showErrors(form, err, fallback) {
  clearErrors(form);
  const rest = [];
  for (const f of err.fields || []) {
    const key = f.field.split(/[.[]/)[0];
    const slot = $(`[data-error-for="${key}"]`, form);
    const input = $(`[data-field="${key}"]`, form);
    if (input) input.setAttribute('aria-invalid', 'true');
    if (slot) slot.textContent = (slot.textContent ? slot.textContent + ' ' : '') + f.description;
    else rest.push(`${f.field}: ${f.description}`);
  }
  if (fallback) fallback.textContent = rest.length ? rest.join('; ') : (err.fields && err.fields.length ? '' : err.message);
}

function clearErrors(form) {
  $$('[data-error-for]', form).forEach((e) => { e.textContent = ''; });
  $$('[aria-invalid]', form).forEach((e) => e.removeAttribute('aria-invalid'));
  $$('.field-error[role=alert]', form).forEach((e) => { e.textContent = ''; });
}

// dur turns "90", "90s", "1.5m", "2h", "500ms" or "1d" into a protobuf
// JSON duration ("90s"); what it cannot read goes to the server as typed,
// whose answer says what is wrong.
function dur(s) {
  s = (s || '').trim();
  if (!s) return undefined;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(s);
  if (!m) return s;
  const mult = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 }[m[2] || 's'];
  return `${+(parseFloat(m[1]) * mult).toFixed(3)}s`;
}
const seconds = (d) => (d ? parseFloat(d) : 0);
const fmtDur = (d) => { const s = seconds(d); if (!s) return '–'; if (s % 86400 === 0) return s / 86400 + 'd'; if (s % 3600 === 0) return s / 3600 + 'h'; if (s % 60 === 0) return s / 60 + 'm'; if (s < 1) return +(s * 1000).toFixed(3) + 'ms'; return s + 's'; };
const fmtTime = (t) => (t ? new Date(t).toLocaleString() : '–');
// fmtExpiry shows when a key or an override expires, or that it has.
const fmtExpiry = (t) => (!t ? 'never' : Date.parse(t) <= Date.now() ? `expired ${fmtTime(t)}` : fmtTime(t));
const algName = (a) => (a || '').replace('ALGORITHM_', '').toLowerCase().replace(/_/g, ' ');

// ---- sign in and navigation ----

async function signIn(key) {
  state.key = key;
  // A tenant's keys say what they are: ask them only what they may, so
  // that signing in costs no refused call (and no error in the browser's
  // console). Any other key is the operator's, or none.
  const tenantKey = key.startsWith('sk_admin_') || key.startsWith('sk_viewer_');
  if (tenantKey) {
    const own = (await api('TenantService', 'GetTenant', {})).tenant;
    // A viewer key reads (the API refuses it the rest): the console offers
    // no change.
    state.role = key.startsWith('sk_viewer_') ? 'viewer' : 'admin';
    $('#signed-in-tenant').textContent = `${own.slug} (${own.name})`;
    fillTryKey(key);
  } else {
    const t = await api('TenantService', 'ListTenants', { pageSize: 100 });
    state.role = 'operator';
    state.tenants = t.tenants || [];
    state.tenantsToken = t.nextPageToken || '';
    state.tenantId = state.tenants.length ? state.tenants[0].id : '';
  }
  sessionStorage.setItem('sluice-key', key);
  document.body.dataset.role = state.role;
  $('#nav').hidden = false;
  $('#who').hidden = false;
  $('#role').textContent = { operator: 'operator', admin: 'tenant admin', viewer: 'viewer (read only)' }[state.role];
  $('#file-content').readOnly = state.role === 'viewer';
  $('#nav button[data-view="access"]').textContent = state.role === 'viewer' ? 'Overrides' : 'Overrides & keys';
  $$('[data-operator]').forEach((e) => { e.hidden = state.role !== 'operator'; });
  fillTenantSelect();
  show('rules');
}

// fillTryKey fills the try panel's check key where the control plane
// offers one to this key (sluice dev does, for its demo tenant).
async function fillTryKey(key) {
  const res = await fetch('try-key', { headers: { Authorization: 'Bearer ' + key } }).catch(() => null);
  if (!res || !res.ok) return;
  const { key: check } = await res.json();
  $('#try-key').value ||= check;
}

// fillTenantSelect offers the tenants loaded, and the one being worked on
// whatever a search of them found.
function fillTenantSelect() {
  const sel = $('#tenant-select');
  const current = state.tenants.find((t) => t.id === state.tenantId) || state.current;
  state.current = current;
  const list = current && !state.tenants.includes(current) ? [current, ...state.tenants] : state.tenants;
  sel.replaceChildren(...list.map((t) => el('option', { value: t.id, selected: t.id === state.tenantId }, `${t.slug} (${t.name})`)));
}

function signOut() {
  sessionStorage.removeItem('sluice-key');
  location.reload();
}

function show(view) {
  state.view = view;
  $$('.view').forEach((s) => { s.hidden = s.id !== 'view-' + view; });
  $$('#nav button').forEach((b) => b.setAttribute('aria-current', b.dataset.view === view ? 'page' : 'false'));
  say('');
  // Busy until the view is loaded: its rows are about to be replaced.
  const section = $('#view-' + view);
  section.setAttribute('aria-busy', 'true');
  return ({ rules: loadRules, access: loadAccess, dashboard: showDashboard, audit: () => loadAudit(true), file: loadFile, operator: () => loadOperator(true) })[view]()
    .catch((e) => say(`Could not load: ${e.message}`))
    .finally(() => section.setAttribute('aria-busy', 'false'));
}

// ---- tiers and rules ----

async function loadRules() {
  const res = await api('TierService', 'ListTiers');
  state.tiers = res.tiers || [];
  const box = $('#tiers');
  box.replaceChildren();
  for (const tier of state.tiers) {
    const rules = tier.rules || [];
    const body = el('tbody');
    rules.forEach((r, i) => body.append(ruleRow(tier, rules, r, i)));
    box.append(el('div', { class: 'card tier', 'data-tier': tier.name },
      el('div', { class: 'tier-head' }, el('h3', {}, `Tier ${tier.name}`),
        el('button', { type: 'button', 'aria-label': `Rename tier ${tier.name}`, onclick: (ev) => renameTierForm(ev.target.closest('.tier-head'), tier) }, 'Rename'),
        confirmButton(`Delete tier ${tier.name}`, `Confirm: delete tier ${tier.name} and its rules`,
          () => act(() => api('TierService', 'DeleteTier', { tierId: tier.id }), `Deleted tier ${tier.name}`))),
      rules.length ? el('div', { class: 'scroll' }, el('table', {},
        el('thead', {}, el('tr', {}, ...['Rule', 'Algorithm', 'Limit', 'Count per', 'Only for', 'State', ''].map((h) => el('th', {}, h || el('span', { class: 'sr' }, 'Actions'))))),
        body)) : el('p', {}, 'No rules yet.')));
  }
  $('#rule-tier').replaceChildren(...state.tiers.map((t) => el('option', { value: t.id }, t.name)));
  $('#try-decider').value ||= localStorage.getItem('sluice-decider') || location.origin;
}

// limitText says what parameters p allow: "100 per 1m, burst 20", "1000
// per calendar month", "50 per calendar day (America/New_York)".
function limitText(p) {
  // An adaptive limit moves between its floor and its ceiling: one in the fleet, recomputed every window.
  if (p.algorithm === 'ALGORITHM_ADAPTIVE_CONCURRENCY') return `${p.floor || 1} to ${p.limit || 0} in flight, adapted every ${fmtDur(p.window)}`;
  const zone = p.timeZone ? ` (${p.timeZone})` : '';
  const per = p.calendar && p.calendar !== 'CALENDAR_UNSPECIFIED' ? ' per calendar ' + p.calendar.replace('CALENDAR_', '').toLowerCase() + zone : p.window ? ' per ' + fmtDur(p.window) : '';
  return `${p.limit || 0}${per}${p.burst && p.burst !== '0' ? ', burst ' + p.burst : ''}`;
}

function ruleRow(tier, rules, r, i) {
  const p = r.params || {};
  const flags = [r.enabled ? 'enabled' : 'disabled', r.shadow ? 'shadow' : '', r.exact ? 'exact' : '', r.block ? 'blocked' : '', r.quota ? 'quota' : '', r.scope === 'SCOPE_GLOBAL' ? 'global, across regions' : '', (r.replaces || []).length ? `replaces ${r.replaces.join(', ')}` : '', r.sync ? `local, synced every ${fmtDur(r.sync)}` : ''].filter(Boolean).join(', ');
  const move = async (d) => {
    const ids = rules.map((x) => x.id);
    [ids[i], ids[i + d]] = [ids[i + d], ids[i]];
    await act(() => api('RuleService', 'ReorderRules', { tierId: tier.id, ruleIds: ids }), `Moved ${r.name}`);
  };
  const update = (change, msg) => act(() => api('RuleService', 'UpdateRule', { rule: { ...r, ...change } }), msg);
  // Blocking rejects every request the rule applies to: asked twice, as deleting is.
  const block = el('button', { type: 'button' }, r.block ? 'Unblock' : 'Block');
  block.addEventListener('click', () => {
    if (r.block || block.dataset.armed) return update({ block: !r.block }, `${r.name}: ${r.block ? 'unblocked' : 'blocked'}`);
    block.dataset.armed = '1';
    block.textContent = 'Confirm block';
  });
  const del = confirmButton(`Delete rule ${r.name}`, 'Confirm delete', () => act(() => api('RuleService', 'DeleteRule', { ruleId: r.id }), `Deleted ${r.name}`));
  return el('tr', { 'data-rule': r.name },
    el('td', {}, r.name), el('td', {}, algName(p.algorithm)), el('td', {}, limitText(p)),
    el('td', {}, (r.keyBy || []).join(', ') || 'everyone'),
    el('td', {}, (r.match || []).map((m) => `${m.key}=${m.value}`).join(', ') || 'all requests'),
    el('td', {}, flags),
    el('td', { class: 'actions' },
      el('button', { type: 'button', 'aria-label': `Move ${r.name} up`, disabled: i === 0, onclick: () => move(-1) }, '↑'),
      el('button', { type: 'button', 'aria-label': `Move ${r.name} down`, disabled: i === rules.length - 1, onclick: () => move(1) }, '↓'),
      el('button', { type: 'button', onclick: () => editRule(tier, r) }, 'Edit'),
      el('button', { type: 'button', 'aria-label': `History of ${r.name}`, 'data-read': true, onclick: () => history(r.id, `rule ${tier.name} / ${r.name}`) }, 'History'),
      el('button', { type: 'button', onclick: () => update({ enabled: !r.enabled }, `${r.enabled ? 'Disabled' : 'Enabled'} ${r.name}`) }, r.enabled ? 'Disable' : 'Enable'),
      block,
      el('button', { type: 'button', onclick: () => update({ shadow: !r.shadow }, `${r.name}: shadow ${r.shadow ? 'off' : 'on'}`) }, r.shadow ? 'Enforce' : 'Shadow'),
      del));
}

// act runs a change, reports it and reloads the current view.
async function act(f, msg) {
  try {
    await f();
  } catch (e) {
    // aborted: someone else changed the same thing since this page read it
    // (the etag sent no longer matches).
    msg = e.code === 'aborted' ? 'Not done: someone else changed it since the page showed it. The page shows it as it is now: make your change again.' : `Failed: ${e.message}`;
  }
  await show(state.view);
  say(msg);
}

// pairs reads "key=value, key=value" as [{key, value}] (a key alone: an
// empty value).
function pairs(text) {
  return text.split(',').map((s) => s.trim()).filter(Boolean).map((kv) => {
    const i = kv.indexOf('=');
    return i < 0 ? { key: kv, value: '' } : { key: kv.slice(0, i).trim(), value: kv.slice(i + 1).trim() };
  });
}

function ruleFromForm(f) {
  const match = pairs(f.match.value);
  // Only the parameters of the chosen algorithm go (those of another,
  // left in the form, would be refused), the optional ones when given; a
  // calendar window has no window.
  const params = { algorithm: f.algorithm.value, limit: f.limit.value || '0' };
  const applies = (name) => f[name].closest('[data-for]').dataset.for.split(' ').includes(f.algorithm.value);
  for (const k of ['window', 'maxDelay', 'warmUp', 'granularity', 'leaseTtl']) {
    if (applies(k) && (k === 'window' || k === 'maxDelay' || seconds(dur(f[k].value)))) params[k] = dur(f[k].value);
  }
  if (applies('burst')) params.burst = f.burst.value || '0';
  let partitionBy, partitions;
  if (applies('floor')) {
    if (Number(f.floor.value)) params.floor = f.floor.value;
    params.adaptation = f.adaptation.value;
    partitionBy = f.partitionBy.value.trim() || undefined;
    partitions = pairs(f.partitions.value).map((p) => ({ value: p.key, share: Number(p.value) }));
  }
  if (applies('coldFactor') && Number(f.coldFactor.value)) params.coldFactor = Number(f.coldFactor.value);
  if (applies('calendar') && f.calendar.value) {
    params.calendar = f.calendar.value;
    delete params.window;
    if (f.timeZone.value.trim()) params.timeZone = f.timeZone.value.trim();
  }
  return {
    id: f.id.value || undefined, etag: f.etag.value || undefined, name: f.name.value, match,
    keyBy: f.keyBy.value.split(',').map((s) => s.trim()).filter(Boolean),
    replaces: f.replaces.value.split(',').map((s) => s.trim()).filter(Boolean),
    message: f.message.value.trim() || undefined,
    params, shadow: f.shadow.checked, exact: f.exact.checked, block: f.block.checked, quota: f.quota.checked, scope: f.global.checked ? 'SCOPE_GLOBAL' : undefined, enabled: f.enabled.checked, failureMode: f.failureMode.value,
    sync: seconds(dur(f.sync.value)) ? dur(f.sync.value) : undefined,
    partitionBy, partitions,
  };
}

function editRule(tier, r) {
  const f = $('#rule-form');
  const p = r.params || {};
  f.id.value = r.id;
  f.etag.value = r.etag || '';
  f.tier.value = tier.id;
  f.tier.disabled = true;
  f.name.value = r.name;
  f.algorithm.value = p.algorithm || 'ALGORITHM_TOKEN_BUCKET';
  f.limit.value = p.limit || 0;
  f.window.value = p.window || '0s';
  f.burst.value = p.burst || 0;
  f.maxDelay.value = p.maxDelay || '0s';
  f.warmUp.value = p.warmUp || '0s';
  f.coldFactor.value = p.coldFactor || 0;
  f.granularity.value = p.granularity || '0s';
  f.leaseTtl.value = p.leaseTtl || '0s';
  f.floor.value = p.floor || 0;
  f.adaptation.value = p.adaptation && p.adaptation !== 'ADAPTATION_UNSPECIFIED' ? p.adaptation : 'ADAPTATION_GRADIENT';
  f.partitionBy.value = r.partitionBy || '';
  f.partitions.value = (r.partitions || []).map((x) => `${x.value}=${x.share}`).join(', ');
  f.calendar.value = p.calendar && p.calendar !== 'CALENDAR_UNSPECIFIED' ? p.calendar : '';
  f.timeZone.value = p.timeZone || '';
  f.keyBy.value = (r.keyBy || []).join(', ');
  f.match.value = (r.match || []).map((m) => `${m.key}=${m.value}`).join(', ');
  f.replaces.value = (r.replaces || []).join(', ');
  f.message.value = r.message || '';
  f.failureMode.value = r.failureMode && r.failureMode !== 'FAILURE_MODE_UNSPECIFIED' ? r.failureMode : 'FAILURE_MODE_LOCAL';
  f.sync.value = r.sync || '0s';
  f.enabled.checked = !!r.enabled;
  f.shadow.checked = !!r.shadow;
  f.exact.checked = !!r.exact;
  f.block.checked = !!r.block;
  f.quota.checked = !!r.quota;
  f.global.checked = r.scope === 'SCOPE_GLOBAL';
  $('#rule-form-title').textContent = `Edit rule ${r.name}`;
  $('#rule-submit').textContent = 'Save rule';
  $('#rule-cancel').hidden = false;
  algorithmHelp();
  f.name.focus();
}

function resetRuleForm() {
  const f = $('#rule-form');
  f.reset();
  f.id.value = '';
  f.etag.value = '';
  f.tier.disabled = false;
  $('#rule-form-title').textContent = 'New rule';
  $('#rule-submit').textContent = 'Create rule';
  $('#rule-cancel').hidden = true;
  clearErrors(f);
  algorithmHelp();
}

// algorithmHelp explains the chosen algorithm and shows its parameters'
// fields alone.
function algorithmHelp() {
  const alg = $('#rule-algorithm').value;
  $('#algorithm-help').textContent = ALGORITHM_HELP[alg] || '';
  for (const d of document.querySelectorAll('#rule-form [data-for]')) d.hidden = !d.dataset.for.split(' ').includes(alg);
}

// badDurations returns a field error for each duration field of the rule
// form that dur cannot read, so that it shows next to its input.
function badDurations(f) {
  const fields = { window: 'window', maxDelay: 'max_delay', warmUp: 'warm_up', granularity: 'granularity', leaseTtl: 'lease_ttl', sync: 'sync' };
  const out = [];
  for (const [name, field] of Object.entries(fields)) {
    const v = f[name].value.trim();
    if (v && !/^\d+(\.\d+)?s$/.test(dur(v))) out.push({ field, description: 'a duration such as 500ms, 90s, 5m, 2h or 1d' });
  }
  return out;
}

async function submitRule(ev) {
  ev.preventDefault();
  const f = ev.target;
  const bad = badDurations(f);
  if (bad.length) {
    showErrors(f, { fields: bad }, $('#rule-error'));
    say('The rule was not saved: a duration is malformed');
    return;
  }
  const rule = ruleFromForm(f);
  try {
    if (rule.id) await api('RuleService', 'UpdateRule', { rule });
    else await api('RuleService', 'CreateRule', { tierId: f.tier.value, rule });
    const msg = `${rule.id ? 'Saved' : 'Created'} rule ${rule.name}`;
    resetRuleForm();
    await loadRules();
    say(msg);
  } catch (e) {
    if (e.code === 'aborted') {
      // The form keeps the edit to copy from; the table shows what is
      // there now, and Edit reads it again.
      clearErrors(f);
      $('#rule-error').textContent = 'This rule was not saved: someone else changed it since you opened it. The list shows it as it is now: choose Edit on it and make your change again.';
      await loadRules();
      say('The rule was not saved: someone else changed it first');
      return;
    }
    showErrors(f, e, $('#rule-error'));
    say(`The rule was not saved: ${e.message}`);
  }
}

// renameTierForm puts a form for tier's new name in its heading head.
// Its overrides and the tenant's default tier follow the rename.
function renameTierForm(head, tier) {
  const id = `rename-${tier.id}`;
  const input = el('input', { id, name: 'name', required: '', pattern: '[a-z0-9][a-z0-9-]{0,62}', value: tier.name, 'data-field': 'name' });
  const form = el('form', { class: 'tier-rename' },
    el('label', { for: id }, `New name of tier ${tier.name}`), input,
    el('p', { class: 'field-error', 'data-error-for': 'name' }),
    el('button', { type: 'submit' }, 'Save name'),
    el('button', { type: 'button', onclick: () => loadRules() }, 'Cancel'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api('TierService', 'RenameTier', { tierId: tier.id, name: input.value });
      await loadRules();
      say(`Renamed tier ${tier.name} to ${input.value}`);
    } catch (e) {
      showErrors(form, e);
      say(`The tier was not renamed: ${e.message}`);
    }
  });
  head.replaceChildren(form);
  input.focus();
}

// confirmButton is a button that does something that cannot be undone:
// the first press asks (its text becomes confirm), the second does it.
function confirmButton(label, confirm, run, text = 'Delete', cls = 'danger') {
  const b = el('button', { type: 'button', class: cls, 'aria-label': label }, text);
  b.addEventListener('click', () => {
    if (!b.dataset.armed) {
      b.dataset.armed = '1';
      b.textContent = confirm;
      return;
    }
    run();
  });
  return b;
}

async function submitTier(ev) {
  ev.preventDefault();
  const f = ev.target;
  try {
    await api('TierService', 'CreateTier', { name: f.name.value });
    const msg = `Created tier ${f.name.value}`;
    f.reset();
    clearErrors(f);
    await loadRules();
    say(msg);
  } catch (e) {
    showErrors(f, e);
    say(`The tier was not created: ${e.message}`);
  }
}

// tryCall posts the try panel's request to the decider's path.
function tryCall(f, path) {
  localStorage.setItem('sluice-decider', f.decider.value);
  const descriptors = { client_id: f.client.value };
  if (f.route.value) descriptors.route = f.route.value;
  for (const { key, value } of pairs(f.more.value)) descriptors[key] = value;
  return fetch(f.decider.value.replace(/\/$/, '') + path, {
    method: 'POST', headers: { Authorization: 'Bearer ' + f.key.value, 'Content-Type': 'application/json' },
    body: JSON.stringify({ descriptors, tier: f.tier.value || undefined }),
  });
}

async function tryReset() {
  const out = $('#try-result');
  try {
    const res = await tryCall($('#try-form'), '/v1/reset');
    const body = await res.json().catch(() => ({}));
    const text = res.status === 200 ? `Reset: ${(body.reset || []).join(', ') || 'no rule applies'}` : `error ${res.status}: ${body.detail || ''}`;
    out.replaceChildren(el('p', { id: 'try-verdict', class: 'verdict ' + (res.status === 200 ? 'allowed' : 'error') }, text));
  } catch (e) {
    out.replaceChildren(el('p', { id: 'try-verdict', class: 'verdict error' }, `The decider did not answer: ${e.message}`));
  }
}

async function tryCheck(ev) {
  ev.preventDefault();
  const f = ev.target;
  const out = $('#try-result');
  try {
    const res = await tryCall(f, '/v1/check');
    const body = await res.json().catch(() => ({}));
    const headers = ['RateLimit-Policy', 'RateLimit', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'Retry-After']
      .filter((h) => res.headers.get(h) !== null).map((h) => `${h}: ${res.headers.get(h)}`);
    const verdict = res.status === 200 ? 'allowed' : res.status === 429 ? 'rejected' : `error ${res.status}`;
    out.replaceChildren(
      el('p', { id: 'try-verdict', class: 'verdict ' + verdict.split(' ')[0] }, `${res.status}: ${verdict}`),
      el('pre', { class: 'headers' }, headers.join('\n')),
      el('pre', {}, JSON.stringify(body, null, 2)));
  } catch (e) {
    out.replaceChildren(el('p', { id: 'try-verdict', class: 'verdict error' }, `The decider did not answer: ${e.message}`));
  }
}

// ---- overrides and keys ----

async function loadAccess() {
  const tiers = await api('TierService', 'ListTiers');
  state.rules = (tiers.tiers || []).flatMap((t) => (t.rules || []).map((r) => ({ ...r, tier: t.name })));
  $('#ov-rule').replaceChildren(el('option', { value: '' }, '(none)'), ...state.rules.map((r) => el('option', { value: r.id }, `${r.tier} / ${r.name}`)));
  await Promise.all([loadOverrides(true), state.role === 'viewer' ? null : loadKeys(true)]);
}

// loadKeys shows the first page of keys (fresh) or appends the next,
// the revoked ones only when asked for.
async function loadKeys(fresh) {
  if (fresh) { state.keysToken = ''; }
  const res = await api('KeyService', 'ListKeys', { showRevoked: $('#keys-revoked').checked, pageToken: state.keysToken, pageSize: 100 });
  const rows = (res.keys || []).map((k) => el('tr', {},
    el('td', {}, k.name || '–'), el('td', {}, (k.kind || '').replace('KEY_KIND_', '').toLowerCase()), el('td', {}, k.prefix + '…'),
    el('td', {}, fmtTime(k.createdAt)), el('td', {}, fmtTime(k.lastUsedAt)), el('td', {}, fmtTime(k.revokedAt)),
    el('td', {}, fmtExpiry(k.expiresAt)),
    el('td', { class: 'actions' }, k.revokedAt ? '' : rotateButton(k),
      k.revokedAt ? '' : el('button', { type: 'button', class: 'danger', onclick: () => act(() => api('KeyService', 'RevokeKey', { keyId: k.id }), `Revoked ${k.name || k.prefix}`) }, 'Revoke'))));
  if (fresh) $('#keys-table tbody').replaceChildren(...rows);
  else $('#keys-table tbody').append(...rows);
  state.keysToken = res.nextPageToken || '';
  $('#keys-more').hidden = !state.keysToken;
}

// loadOverrides shows the first page of overrides (fresh) or appends the
// next: a tenant may have 100,000 of them, found by their id's prefix.
async function loadOverrides(fresh) {
  if (fresh) { state.ovToken = ''; $('#overrides-table tbody').replaceChildren(); }
  const res = await api('OverrideService', 'ListOverrides', { identifierPrefix: $('#ov-prefix').value.trim(), pageToken: state.ovToken, pageSize: 100 });
  // tier / rule: two tiers' rules often share a name (per-client).
  const ruleName = (id) => { const r = state.rules.find((x) => x.id === id); return r ? `${r.tier} / ${r.name}` : id || '–'; };
  $('#overrides-table tbody').append(...(res.overrides || []).map((o) => el('tr', {},
    el('td', {}, whom(o)), el('td', {}, o.tier || '–'), el('td', {}, ruleName(o.ruleId)), el('td', {}, o.block ? 'blocked' : '–'),
    el('td', {}, o.params ? `${limitText(o.params)} (${algName(o.params.algorithm)})` : '–'), el('td', {}, fmtExpiry(o.expiresAt)),
    el('td', { class: 'actions' },
      el('button', { type: 'button', 'aria-label': `Edit the override of ${o.identifier}`, onclick: () => editOverride(o) }, 'Edit'),
      el('button', { type: 'button', 'aria-label': `History of the override of ${o.identifier}`, 'data-read': true, onclick: () => history(o.id, `the override of ${o.identifier}`) }, 'History'),
      el('button', { type: 'button', class: 'danger', onclick: () => act(() => api('OverrideService', 'DeleteOverride', { overrideId: o.id }), `Deleted the override of ${o.identifier}`) }, 'Delete')))));
  state.ovToken = res.nextPageToken || '';
  $('#ov-more').hidden = !state.ovToken;
}

// whom is an override's identifier, after its descriptor's name unless
// that is client_id: ip=10.0.0.7.
function whom(o) {
  return o.descriptorKey && o.descriptorKey !== 'client_id' ? `${o.descriptorKey}=${o.identifier}` : o.identifier;
}

// editOverride puts o in the override form, to be saved in place
// (UpdateOverride, conditioned on the etag it was read with).
function editOverride(o) {
  const f = $('#override-form');
  resetOverrideForm();
  f.id.value = o.id;
  f.etag.value = o.etag || '';
  f.identifier.value = o.identifier;
  f.descriptorKey.value = o.descriptorKey === 'client_id' ? '' : o.descriptorKey || '';
  f.tier.value = o.tier || '';
  f.rule.value = o.ruleId || '';
  f.block.checked = !!o.block;
  // A calendar window has no window to show: left blank, it is kept.
  if (o.params) { f.limit.value = o.params.limit || 0; f.window.value = o.params.window ? fmtDur(o.params.window) : ''; }
  // Left empty, the burst follows the limit from what it is now.
  f.burst.placeholder = o.params && +o.params.burst > 0 ? `now ${o.params.burst}` : '';
  state.ovExpiresAt = o.expiresAt || '';
  $('#ov-expires-help').hidden = false;
  $('#ov-form-title').textContent = `Edit the override of ${o.identifier}`;
  $('#ov-submit').textContent = 'Save override';
  $('#ov-cancel').hidden = false;
  f.identifier.focus();
}

// overrideFor opens a new override for a client the dashboard shows
// rejected: its identifier in the descriptor the rule counts by, and the
// rule it hit, whose limit is filled in to be raised (or lowered, or the
// client blocked) from there.
async function overrideFor(c, descriptor) {
  await show('access');
  resetOverrideForm();
  const f = $('#override-form');
  f.identifier.value = c.clientKey;
  f.descriptorKey.value = descriptor === 'client_id' ? '' : descriptor;
  f.rule.value = c.ruleId;
  ruleChosen();
  f.limit.focus();
}

function resetOverrideForm() {
  const f = $('#override-form');
  f.reset();
  f.burst.placeholder = '';
  f.id.value = '';
  f.etag.value = '';
  state.ovExpiresAt = '';
  clearErrors(f);
  $('#ov-expires-help').hidden = true;
  $('#ov-form-title').textContent = 'New override';
  $('#ov-submit').textContent = 'Create override';
  $('#ov-cancel').hidden = true;
}

// ruleChosen fills a new override's limit and window with the rule's, to
// be raised or lowered from there.
function ruleChosen() {
  const f = $('#override-form');
  const rule = state.rules.find((r) => r.id === f.rule.value);
  if (f.id.value || !rule || !rule.params) return;
  f.limit.value = rule.params.limit || 0;
  f.window.value = fmtDur(rule.params.window) === '–' ? '' : fmtDur(rule.params.window);
}

async function submitOverride(ev) {
  ev.preventDefault();
  const f = ev.target;
  const o = { identifier: f.identifier.value, descriptorKey: f.descriptorKey.value.trim() || undefined, tier: f.tier.value || undefined, ruleId: f.rule.value || undefined, block: f.block.checked };
  const editing = f.id.value;
  if (o.ruleId && !o.block) {
    // Parameters without an algorithm: the control plane completes what
    // the form does not show (the algorithm and its settings, a calendar
    // window, a burst in proportion to the limit) from the override's own
    // parameters, or the rule's for a new one or one moved to another rule.
    o.params = { limit: f.limit.value || undefined, window: dur(f.window.value), burst: f.burst.value || undefined };
    // Another algorithm: these parameters whole, the burst only where
    // there is one.
    if (f.algorithm.value) {
      o.params.algorithm = f.algorithm.value;
      if (!['ALGORITHM_TOKEN_BUCKET', 'ALGORITHM_GCRA'].includes(f.algorithm.value)) delete o.params.burst;
    }
  }
  if (editing) Object.assign(o, { id: f.id.value, etag: f.etag.value || undefined, expiresAt: state.ovExpiresAt || undefined });
  if (f.expires.value.trim() === 'never') delete o.expiresAt;
  else if (f.expires.value.trim()) {
    const expires = seconds(dur(f.expires.value));
    if (!(expires > 0)) {
      showErrors(f, { fields: [{ field: 'expires_at', description: 'a duration such as 90m, 24h or 7d' }] }, $('#override-error'));
      return;
    }
    o.expiresAt = new Date(Date.now() + expires * 1000).toISOString();
  }
  try {
    if (editing) await api('OverrideService', 'UpdateOverride', { override: o });
    else await api('OverrideService', 'CreateOverride', { override: o });
    resetOverrideForm();
    await loadAccess();
    say(`${editing ? 'Saved the override of' : 'Created an override for'} ${o.identifier}`);
  } catch (e) {
    if (e.code === 'aborted') {
      clearErrors(f);
      $('#override-error').textContent = 'This override was not saved: someone else changed it since you opened it. The list shows it as it is now: choose Edit on it and make your change again.';
      await loadOverrides(true);
      return;
    }
    showErrors(f, e, $('#override-error'));
  }
}

async function submitKey(ev) {
  ev.preventDefault();
  const f = ev.target;
  clearErrors(f);
  const key = { kind: f.kind.value, name: f.name.value };
  if (f.expires.value.trim()) {
    const expires = seconds(dur(f.expires.value));
    if (!(expires > 0)) {
      showErrors(f, { fields: [{ field: 'expires_at', description: 'a duration such as 90m, 24h or 30d' }] }, $('#key-error'));
      return;
    }
    key.expiresAt = new Date(Date.now() + expires * 1000).toISOString();
  }
  try {
    const res = await api('KeyService', 'CreateKey', key);
    showSecret(res.secret);
    await loadAccess();
  } catch (e) {
    showErrors(f, e, $('#key-error'));
    say(`The key was not created: ${e.message}`);
  }
}

// showSecret shows a new key's secret, this once.
function showSecret(secret, more) {
  const box = $('#key-secret');
  box.hidden = false;
  box.replaceChildren(el('p', {}, 'The secret, shown this once — store it now:'), el('code', { id: 'new-secret' }, secret), ...(more ? [el('p', {}, more)] : []));
}

// rotateButton replaces key k by a new one (asked twice): the old one
// works on for a day, so its users can move to the new secret.
function rotateButton(k) {
  return confirmButton(`Rotate key ${k.name || k.prefix}`, 'Confirm: new secret, the old one for 24h more', async () => {
    try {
      const res = await api('KeyService', 'RotateKey', { keyId: k.id, grace: '86400s' });
      await loadAccess();
      showSecret(res.secret, `The old key (${k.prefix}…) works until ${fmtTime(res.old.expiresAt)}.`);
      say(`Rotated ${k.name || k.prefix}`);
    } catch (e) {
      say(`The key was not rotated: ${e.message}`);
    }
  }, 'Rotate', '');
}

// ---- dashboard ----

// range is the time range picked (the last so long, or from and to in
// local time), in about 60 steps. Over days the steps are whole hours
// from a whole hour, which the server reads from its hourly rollups (a
// sixtieth of the rows). A custom range that cannot be read throws an
// error with field errors, as the server's.
function range() {
  let from, to;
  if ($('#range').value === 'custom') {
    from = new Date($('#range-from').value);
    to = new Date($('#range-to').value);
    const fields = [];
    if (isNaN(from)) fields.push({ field: 'from', description: 'Pick when the range starts.' });
    if (isNaN(to)) fields.push({ field: 'to', description: 'Pick when the range ends.' });
    else if (!isNaN(from) && to <= from) fields.push({ field: 'to', description: 'The range must end after it starts.' });
    if (fields.length) throw Object.assign(new Error('invalid range'), { fields });
  } else {
    to = new Date(Math.ceil(Date.now() / 60000) * 60000);
    from = new Date(to.getTime() - parseInt($('#range').value, 10) * 1000);
  }
  const span = (to - from) / 1000;
  let step = Math.max(60, Math.ceil(span / 60 / 60) * 60);
  if (span >= 2 * 86400) {
    step = Math.ceil(span / 60 / 3600) * 3600;
    from = new Date(Math.floor(from.getTime() / 3600000) * 3600000);
  }
  return { from: from.toISOString(), to: to.toISOString(), step: step + 's' };
}

// localInput formats d for a datetime-local input, in local time.
function localInput(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

// rangeChosen shows the custom range's inputs when it is picked, filled in
// with the last day the first time, and loads the dashboard.
function rangeChosen() {
  const custom = $('#range').value === 'custom';
  $('#custom-range').hidden = !custom;
  if (custom && !$('#range-from').value && !$('#range-to').value) {
    const to = new Date();
    $('#range-to').value = localInput(to);
    $('#range-from').value = localInput(new Date(to.getTime() - 86400000));
  }
  showDashboard();
}

// showDashboard loads the dashboard, its range's errors (the server's too)
// next to the range's inputs; what failed to load shows nothing rather
// than the figures of the range before.
function showDashboard() {
  clearErrors($('#range-form'));
  return loadDashboard().catch((e) => {
    state.chart = null;
    $('#chart').replaceChildren();
    $('#totals').textContent = '';
    $$('#top-table tbody, #rule-table tbody, #tier-table tbody, #region-table tbody').forEach((b) => b.replaceChildren());
    showErrors($('#range-form'), e, $('#status'));
  });
}

async function loadDashboard() {
  const r = range();
  const [ts, top, byRule, byTier, byRegion, tiers] = await Promise.all([
    api('ReportService', 'GetTimeseries', { from: r.from, to: r.to, step: r.step }),
    api('ReportService', 'GetTopClients', { from: r.from, to: r.to, limit: 10 }),
    api('ReportService', 'GetBreakdown', { from: r.from, to: r.to, by: 'BREAKDOWN_BY_RULE' }),
    api('ReportService', 'GetBreakdown', { from: r.from, to: r.to, by: 'BREAKDOWN_BY_TIER' }),
    api('ReportService', 'GetBreakdown', { from: r.from, to: r.to, by: 'BREAKDOWN_BY_REGION' }),
    state.role === 'viewer' ? {} : api('TierService', 'ListTiers'),
  ]);
  // An override matches one descriptor: a rejected client of a rule that
  // counts per one (client_id, ip …) can be given its own limit of it.
  const perClient = new Map((tiers.tiers || []).flatMap((t) => t.rules || [])
    .filter((x) => (x.keyBy || []).length === 1).map((x) => [x.id, x.keyBy[0]]));
  const rules = new Map((tiers.tiers || []).flatMap((t) => t.rules || []).map((x) => [x.id, x]));
  // An empty client is a tenant-wide rule's one counter, or requests that
  // gave a per-client rule no identifier (they count together).
  const who = (c) => c.clientKey || (!rules.has(c.ruleId) ? '(empty)'
    : (rules.get(c.ruleId).keyBy || []).length ? '(no identifier given)' : '(everyone)');
  const points = ts.points || [];
  const n = (v) => parseInt(v || '0', 10);
  state.chart = points.map((p) => ({ t: p.start, rej: n(p.counts && p.counts.rejected), sh: n(p.counts && p.counts.shadowRejected) }));
  drawChart(state.chart);
  const sum = (k) => points.reduce((a, p) => a + n(p.counts && p.counts[k]), 0);
  $('#totals').textContent = `${sum('allowed')} allowed, ${sum('rejected')} rejected, ${sum('shadowRejected')} shadow would-block` +
    (sum('droppedRejections') ? `, ${sum('droppedRejections')} rejection events dropped (top clients may fall short)` : '');
  $('#top-table tbody').replaceChildren(...(top.clients || []).map((c) => el('tr', { 'data-client': c.clientKey },
    el('td', {}, who(c)), el('td', {}, c.ruleName || c.ruleId), el('td', {}, c.rejected + (n(c.error) ? ` (±${c.error})` : '')),
    el('td', { class: 'actions' }, c.clientKey && perClient.has(c.ruleId)
      ? el('button', { type: 'button', 'aria-label': `Override ${c.ruleName || c.ruleId} for ${c.clientKey}`, onclick: () => overrideFor(c, perClient.get(c.ruleId)) }, 'Override')
      : ''))));
  $('#rule-table tbody').replaceChildren(...(byRule.rows || []).map((x) => el('tr', {},
    el('td', {}, x.ruleName || x.ruleId), el('td', {}, x.tier), el('td', {}, n(x.counts.allowed)), el('td', {}, n(x.counts.rejected)), el('td', {}, n(x.counts.shadowRejected)))));
  $('#tier-table tbody').replaceChildren(...(byTier.rows || []).map((x) => el('tr', {},
    el('td', {}, x.tier), el('td', {}, n(x.counts.allowed)), el('td', {}, n(x.counts.rejected)), el('td', {}, n(x.counts.shadowRejected)))));
  // Deciders started without -region count as one region of no name.
  $('#region-table tbody').replaceChildren(...(byRegion.rows || []).map((x) => el('tr', {},
    el('td', {}, x.region || '(no region)'), el('td', {}, n(x.counts.allowed)), el('td', {}, n(x.counts.rejected)), el('td', {}, n(x.counts.shadowRejected)))));
  say(`Updated ${new Date().toLocaleTimeString()}`);
}

// drawChart draws stacked bars of rejections (and shadow would-blocks) per step as SVG.
function drawChart(points) {
  // As wide as it is drawn, so that its labels are not squeezed on a
  // phone (720 while the view is hidden).
  const W = Math.max(300, Math.round($('#chart').clientWidth) || 720), H = 180, pad = 28;
  const max = Math.max(1, ...points.map((p) => p.rej + p.sh));
  const bw = points.length ? (W - pad) / points.length : 0;
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  const add = (tag, attrs, text) => { const e = document.createElementNS(NS, tag); for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v); if (text !== undefined) e.textContent = text; svg.append(e); return e; };
  add('line', { x1: pad, y1: H - 20, x2: W, y2: H - 20, class: 'axis' });
  add('text', { x: 0, y: 12, class: 'label' }, String(max));
  add('text', { x: 0, y: H - 22, class: 'label' }, '0');
  points.forEach((p, i) => {
    const x = pad + i * bw + 1, scale = (H - 30) / max;
    const hr = p.rej * scale, hs = p.sh * scale;
    if (hr > 0) add('rect', { x, y: H - 20 - hr, width: Math.max(1, bw - 2), height: hr, class: 'rej' }).append(Object.assign(document.createElementNS(NS, 'title'), { textContent: `${new Date(p.t).toLocaleString()}: ${p.rej} rejected` }));
    if (hs > 0) add('rect', { x, y: H - 20 - hr - hs, width: Math.max(1, bw - 2), height: hs, class: 'sh' });
  });
  if (points.length) {
    // Over more than a day a time alone would not say which day.
    const days = Date.parse(points[points.length - 1].t) - Date.parse(points[0].t) >= 86400000;
    const label = (t) => days ? new Date(t).toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' }) : new Date(t).toLocaleTimeString();
    add('text', { x: pad, y: H - 4, class: 'label' }, label(points[0].t));
    add('text', { x: W - 2, y: H - 4, class: 'label', 'text-anchor': 'end' }, label(points[points.length - 1].t));
  }
  $('#chart').replaceChildren(svg);
}

async function exportCSV(report) {
  clearErrors($('#range-form'));
  try {
    const r = range();
    const res = await api('ReportService', 'ExportCSV', { from: r.from, to: r.to, step: r.step, report });
    const a = el('a', { href: URL.createObjectURL(new Blob([res.csv], { type: 'text/csv' })), download: res.filename });
    document.body.append(a);
    a.click();
    a.remove();
    say(`Exported ${res.filename}`);
  } catch (e) {
    showErrors($('#range-form'), e, $('#status'));
    say(`Export failed: ${$('#status').textContent || 'see the range'}`);
  }
}

function autoRefresh() {
  clearInterval(state.timer);
  state.timer = setInterval(() => {
    if (state.view === 'dashboard' && $('#auto-refresh').checked && !document.hidden) loadDashboard().catch(() => {});
  }, 10000);
}

// ---- audit log ----

async function loadAudit(fresh) {
  if (fresh) { state.auditBefore = 0; $('#audit-table tbody').replaceChildren(); }
  const of = state.auditOf;
  $('#audit-of').hidden = !of;
  $('#audit-of-name').textContent = of ? of.label : '';
  const res = await api('AuditService', 'ListAudit', { beforeId: String(state.auditBefore), limit: 50, resourceId: of ? of.id : '' });
  const entries = res.entries || [];
  $('#audit-table tbody').append(...entries.map((a) => el('tr', {},
    el('td', {}, fmtTime(a.at)), el('td', { title: a.actor }, a.actorName || a.actor), el('td', {}, a.action), el('td', { title: a.resourceId || '' }, `${a.resource} ${auditName(a)}`), el('td', {}, a.configVersion || '–'),
    el('td', {}, el('ul', { class: 'changes' }, ...(a.changes || []).map(changeItem))))));
  if (entries.length) state.auditBefore = entries[entries.length - 1].id;
  $('#audit-more').hidden = entries.length < 50;
}

// auditName names what an audit entry changed by its name (a rule's, a
// tier's), its identifier (an override's) or its slug (a tenant's), from
// the value after the change or, for a deletion, before it; its id when
// the value names none.
function auditName(a) {
  for (const v of [a.newValue, a.oldValue]) {
    try {
      const o = JSON.parse(v || 'null');
      const name = o && (o.name || o.Name || o.identifier || o.Identifier || o.slug || o.Slug);
      if (name) return name;
    } catch (e) { /* not JSON: the id below */ }
  }
  return a.resourceId || '';
}

// changeItem is one field an audit entry changed: "limit: 10 → 20", or
// the value set (a creation) or removed (a deletion).
function changeItem(c) {
  if (!c.old) return el('li', {}, `${c.field || 'value'}: ${c.new}`);
  if (!c.new) return el('li', {}, `${c.field || 'value'}: ${c.old} → (none)`);
  return el('li', {}, `${c.field || 'value'}: ${c.old} → ${c.new}`);
}

// history shows the audit log of one resource (a rule, an override).
function history(id, label) {
  state.auditOf = { id, label };
  return show('audit');
}

// ---- tenant file ----

// Bytes travel as base64 in Connect's JSON; the file is UTF-8.
const toBase64 = (text) => btoa(String.fromCharCode(...new TextEncoder().encode(text)));
const fromBase64 = (b64) => new TextDecoder().decode(Uint8Array.from(atob(b64 || ''), (c) => c.charCodeAt(0)));

async function loadFile() {
  const res = await api('TenantFileService', 'ExportTenantFile');
  $('#file-content').value = fromBase64(res.content);
  state.fileVersion = res.configVersion || '0';
  state.fileSlug = res.slug || '';
  $('#file-error').textContent = '';
  $('#file-changes').replaceChildren();
}

// byPath tells an error of a whole file: each field error by its path
// (tiers[0].rules[1].limit), else the message.
const byPath = (e) => (e.fields.length ? e.fields.map((f) => `${f.field}: ${f.description}`).join('; ') : e.message);

// applyFile applies the edited file (dry: a dry run), only over the
// version it was loaded at, and lists the changes or the errors by path.
async function applyFile(dry) {
  const out = $('#file-changes');
  const errBox = $('#file-error');
  errBox.textContent = '';
  out.replaceChildren();
  say('');
  try {
    const res = await api('TenantFileService', 'ApplyTenantFile', {
      content: toBase64($('#file-content').value), prune: $('#file-prune').checked, dryRun: dry, ifVersion: String(state.fileVersion || '0'),
    });
    const changes = res.changes || [];
    out.append(...changes.map((c) => el('li', {}, `${dry ? 'would ' : ''}${c.op} ${c.kind} ${c.name}`)));
    if (res.skipped) out.append(el('li', {}, `not applied: ${res.skipped}`));
    const n = `${changes.length} change${changes.length === 1 ? '' : 's'}`;
    say(changes.length === 0 ? 'The tenant already matches the file.' : dry ? `Dry run: ${n}, none made.` : `Applied ${n} as config version ${res.configVersion}.`);
    if (!dry && changes.length) state.fileVersion = res.configVersion;
  } catch (e) {
    if (e.code === 'aborted') errBox.textContent = 'The tenant changed since the file was loaded: reload it and apply your edit again.';
    else errBox.textContent = byPath(e);
  }
}

// importConfig imports the pasted configuration into the tenant's tier
// (dry: a dry run), lists what it did and its notes, and shows the tenant
// file as it then is.
async function importConfig(dry) {
  const out = $('#import-changes');
  const errBox = $('#import-error');
  errBox.textContent = '';
  out.replaceChildren();
  say('');
  const format = $('#import-format').value;
  try {
    const res = await api('TenantFileService', 'ImportConfig', {
      format, contents: [toBase64($('#import-content').value)], tenant: format === 'IMPORT_FORMAT_KONG' ? state.fileSlug || '' : '',
      tier: $('#import-tier').value.trim(), prune: $('#import-prune').checked, dryRun: dry,
    });
    const rules = (what, names) => (names && names.length ? [el('li', {}, `${dry ? 'would be ' : ''}${what}: ${names.join(', ')}`)] : []);
    out.append(...rules('created', res.created), ...rules('updated', res.updated), ...rules('deleted', res.deleted),
      ...rules('unchanged', res.unchanged), ...(res.notes || []).map((n) => el('li', {}, `Note: ${n}`)));
    const tenant = `tenant ${res.tenant}${res.tenantCreated ? ' (a new tenant: the domain names it)' : ''}`;
    say(`${dry ? 'Dry run of the import into' : 'Imported into'} ${tenant}, tier ${res.tier}${dry ? ': nothing made.' : `, config version ${res.configVersion}.`}`);
    if (!dry) await loadFile();
  } catch (e) {
    errBox.textContent = byPath(e);
  }
}

// ---- operator ----

// loadOperator shows the first page of tenants (fresh; those whose slug
// starts with the search's prefix) or appends the next, and the deciders.
async function loadOperator(fresh = true) {
  const page = { slugPrefix: $('#tenant-prefix').value.trim(), pageSize: 100, pageToken: fresh ? '' : state.tenantsToken };
  const [t, d] = await Promise.all([api('TenantService', 'ListTenants', page), api('DeciderService', 'ListDeciders')]);
  state.tenants = fresh ? t.tenants || [] : [...state.tenants, ...(t.tenants || [])];
  state.tenantsToken = t.nextPageToken || '';
  $('#tenant-more').hidden = !state.tenantsToken;
  renderTenants();
  $('#deciders-table tbody').replaceChildren(...(d.deciders || []).map((x) => el('tr', {},
    el('td', {}, x.name), el('td', {}, deciderRegion(x.health || {})), el('td', {}, `${fmtTime(x.lastSyncedAt)} (${ago(x.lastSyncedAt)})`),
    el('td', {}, Object.entries(x.configVersions || {}).map(([id, v]) => enforced(id, v)).join(', ') || '–'),
    el('td', {}, deciderRedis(x.health || {})),
    el('td', {}, `${Number((x.health || {}).eventsSpooled || 0) + Number((x.health || {}).eventsQueued || 0)} / ${(x.health || {}).eventsDropped || 0}`))));
}

// ago says how long before now t was, roughly: a decider pulls every 30 s
// by default, so one last synced minutes ago has stopped, or is cut off
// from the control plane (a restarted decider is listed anew, under its
// new process's name, and the old entry ages out after a day).
function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(t)) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

// enforced names the config version a decider enforces of a tenant, and
// the tenant's latest when the decider is behind it (of the tenants
// loaded): a decider that has not pulled since the tenant changed, cut off
// from the control plane or refusing the snapshot.
function enforced(id, v) {
  const t = state.tenants.find((x) => x.id === id) || {};
  const latest = Number(t.configVersion || 0);
  return `${t.slug || id}: v${v}` + (latest > Number(v) ? ` (behind: v${latest})` : '');
}

// deciderRegion is a decider's region, and the regions whose global
// counts it has stopped hearing: a partition, as it sees it.
function deciderRegion(h) {
  const silent = h.silentRegions || [];
  return (h.region || '–') + (silent.length ? ` (not hearing ${silent.join(', ')})` : '');
}

// deciderRedis says how a decider fares with Redis: its breaker, and the
// failed calls since it started ("in memory" when it decides without).
function deciderRedis(h) {
  if (!h.breaker) return 'in memory';
  const errors = Number(h.engineErrors || 0);
  return errors ? `${h.breaker}, ${errors} errors` : h.breaker;
}

function renderTenants() {
  fillTenantSelect();
  $('#tenants-table tbody').replaceChildren(...state.tenants.map((x) => {
    const suspended = x.status === 'TENANT_STATUS_SUSPENDED';
    // Deleting removes the tenant's whole configuration: asked twice.
    const del = confirmButton(`Delete tenant ${x.slug}`, `Confirm: delete ${x.slug} and all its configuration`, () => deleteTenant(x));
    return el('tr', {},
      el('td', {}, x.slug), el('td', {}, x.name), el('td', {}, x.defaultTier), el('td', {}, suspended ? 'suspended: checks refused' : 'active'),
      el('td', {}, el('button', { type: 'button', 'aria-pressed': String(!!x.shadow), 'aria-label': `Shadow mode for ${x.slug}: ${x.shadow ? 'on' : 'off'}`,
        onclick: () => changeTenant(x, { shadow: !x.shadow }, `shadow mode ${x.shadow ? 'off' : 'on'}`) }, x.shadow ? 'On: rejects nothing' : 'Off')),
      el('td', { class: 'mono' }, x.id),
      el('td', {}, `v${x.configVersion || 0}`),
      el('td', { class: 'actions' },
        el('button', { type: 'button', 'aria-label': `${suspended ? 'Resume' : 'Suspend'} tenant ${x.slug}`,
          onclick: () => changeTenant(x, { status: suspended ? 'TENANT_STATUS_ACTIVE' : 'TENANT_STATUS_SUSPENDED' }, suspended ? 'resumed' : 'suspended: its checks are refused') },
        suspended ? 'Resume' : 'Suspend'),
        del));
  }));
}

// changeTenant updates a tenant (shadow mode: every rule reports and none
// rejects, a first rollout; suspension: its checks refused) and shows it
// as it now stands in its place in the pages loaded.
async function changeTenant(x, change, what) {
  try {
    await api('TenantService', 'UpdateTenant', { tenant: { ...x, ...change } });
    const now = (await api('TenantService', 'GetTenant', { tenantId: x.id })).tenant;
    state.tenants = state.tenants.map((t) => (t.id === x.id ? now : t));
    renderTenants();
    say(`Tenant ${x.slug}: ${what}`);
  } catch (e) {
    say(`Tenant ${x.slug} was not changed: ${e.message}`);
  }
}

async function deleteTenant(x) {
  try {
    await api('TenantService', 'DeleteTenant', { tenantId: x.id });
    state.tenants = state.tenants.filter((t) => t.id !== x.id);
    if (state.tenantId === x.id) { state.tenantId = state.tenants.length ? state.tenants[0].id : ''; state.current = null; }
    renderTenants();
    say(`Deleted tenant ${x.slug}`);
  } catch (e) {
    say(`Tenant ${x.slug} was not deleted: ${e.message}`);
  }
}

async function submitTenant(ev) {
  ev.preventDefault();
  const f = ev.target;
  try {
    const res = await api('TenantService', 'CreateTenant', { tenant: { slug: f.slug.value, name: f.name.value } });
    f.reset();
    clearErrors(f);
    await loadOperator();
    say(`Created tenant ${res.tenant.slug}`);
  } catch (e) {
    showErrors(f, e);
    say(`The tenant was not created: ${e.message}`);
  }
}

// ---- wiring ----

document.addEventListener('DOMContentLoaded', () => {
  $('#signin-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    $('#signin-error').textContent = '';
    try {
      await signIn($('#signin-key').value.trim());
    } catch (e) {
      $('#signin-error').textContent = e.code === 'unauthenticated' ? 'That key is not valid (or was revoked).' : e.message;
    }
  });
  $('#sign-out').addEventListener('click', signOut);
  // The chart is drawn as wide as it shows: again when that changes.
  let resized;
  window.addEventListener('resize', () => {
    clearTimeout(resized);
    resized = setTimeout(() => { if (state.chart && state.view === 'dashboard') drawChart(state.chart); }, 150);
  });
  $$('#nav button').forEach((b) => b.addEventListener('click', () => { state.auditOf = null; show(b.dataset.view); }));
  $('#audit-all').addEventListener('click', () => { state.auditOf = null; loadAudit(true).catch((e) => say(e.message)); });
  $('#tenant-select').addEventListener('change', (ev) => { state.tenantId = ev.target.value; show(state.view); });
  $('#tier-form').addEventListener('submit', submitTier);
  $('#rule-form').addEventListener('submit', submitRule);
  $('#rule-cancel').addEventListener('click', resetRuleForm);
  $('#rule-algorithm').addEventListener('change', algorithmHelp);
  // The browser's own list of IANA zones, offered as the time zone is typed.
  const zones = Intl.supportedValuesOf ? Intl.supportedValuesOf('timeZone') : [];
  $('#time-zones').replaceChildren(...zones.map((z) => el('option', { value: z })));
  $('#try-form').addEventListener('submit', tryCheck);
  $('#try-reset').addEventListener('click', tryReset);
  $('#override-form').addEventListener('submit', submitOverride);
  $('#ov-rule').addEventListener('change', ruleChosen);
  $('#ov-find').addEventListener('submit', (ev) => { ev.preventDefault(); loadOverrides(true); });
  $('#ov-more').addEventListener('click', () => loadOverrides(false));
  $('#keys-more').addEventListener('click', () => loadKeys(false).catch((e) => say(`Could not load: ${e.message}`)));
  $('#keys-revoked').addEventListener('change', () => loadKeys(true).catch((e) => say(`Could not load: ${e.message}`)));
  $('#tenant-find').addEventListener('submit', (ev) => { ev.preventDefault(); loadOperator(true).catch((e) => say(`Could not load: ${e.message}`)); });
  $('#tenant-more').addEventListener('click', () => loadOperator(false).catch((e) => say(`Could not load: ${e.message}`)));
  $('#ov-cancel').addEventListener('click', resetOverrideForm);
  $('#key-form').addEventListener('submit', submitKey);
  $('#range-form').addEventListener('submit', (ev) => { ev.preventDefault(); showDashboard(); });
  $('#range').addEventListener('change', rangeChosen);
  $('#range-from').addEventListener('change', showDashboard);
  $('#range-to').addEventListener('change', showDashboard);
  $$('[data-export]').forEach((b) => b.addEventListener('click', () => exportCSV(b.dataset.export)));
  $('#audit-more').addEventListener('click', () => loadAudit(false).catch((e) => say(e.message)));
  $('#tenant-form').addEventListener('submit', submitTenant);
  $('#file-form').addEventListener('submit', (ev) => { ev.preventDefault(); applyFile(false); });
  $('#file-dry').addEventListener('click', () => applyFile(true));
  $('#import-form').addEventListener('submit', (ev) => { ev.preventDefault(); importConfig(false); });
  $('#import-dry').addEventListener('click', () => importConfig(true));
  $('#file-reload').addEventListener('click', () => loadFile().catch((e) => say(e.message)));
  algorithmHelp();
  autoRefresh();
  const saved = sessionStorage.getItem('sluice-key');
  if (saved) signIn(saved).catch(() => sessionStorage.removeItem('sluice-key'));
  else $('#signin-key').focus();
});
