// GET /: the cluster page (issue 13), as Solr's admin "Cloud" view: live nodes and readers, each
// collection's shards with their range, leader and replicas and their states, and what each
// snapshot reader holds, refreshed every couple of seconds. One self-contained HTML document, no
// build step: the script reads the node's JSON endpoints (/api/cluster, /api/readers) from the
// browser, so the document itself holds no cluster data and is served to anyone (a browser
// cannot send a bearer key when it opens a URL); the data needs a key when the node has keys,
// which the page takes from a `#key=KEY` fragment (never sent to the server, removed from the
// address bar once read) or from its key box, and keeps for the tab (sessionStorage).
// Everything it shows is put in as text, never as HTML; a Content-Security-Policy allows only
// this script and style (by hash) and requests to this node.
import { createHash } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';

const STYLE = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2430; background: #f5f6f8; }
header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 10px 16px; background: #1d2430; color: #fff; }
header h1 { font-size: 16px; margin: 0 12px 0 0; }
#status { flex: 1; }
#status[data-state="error"], #status[data-state="auth"] { color: #ffb4a8; }
form { display: flex; gap: 6px; }
main { padding: 8px 16px 24px; }
section { margin-top: 16px; }
h2 { font-size: 15px; margin: 0 0 6px; }
h3 { font-size: 14px; margin: 12px 0 4px; }
.meta { color: #5b6573; font-weight: normal; }
table { border-collapse: collapse; background: #fff; min-width: 480px; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
th { background: #eceff3; font-weight: 600; }
code, .range { font-family: ui-monospace, monospace; }
.replica, .cached { display: inline-block; margin: 1px 4px 1px 0; padding: 0 6px; border-radius: 3px; background: #e3e6ea; }
.replica[data-state="active"] { background: #cdebd3; }
.replica[data-state="down"] { background: #f6c9c2; text-decoration: line-through; }
.replica[data-state="recovering"] { background: #fbe7b0; }
.replica[data-leader="true"] { font-weight: 700; }
.empty { color: #5b6573; font-style: italic; }
`;

const SCRIPT = `
'use strict';
var REFRESH_MS = 2000;
var KEY_ITEM = 'shardex.apiKey';
var refreshes = 0;

function takeKeyFromFragment() {
  var m = /(?:^#|&)key=([^&]*)/.exec(location.hash);
  if (!m) return;
  try { sessionStorage.setItem(KEY_ITEM, decodeURIComponent(m[1])); } catch (e) { /* storage off: typed keys still work for this load */ }
  history.replaceState(null, '', location.pathname + location.search);
}
var typedKey = '';
function apiKey() {
  try { return sessionStorage.getItem(KEY_ITEM) || typedKey; } catch (e) { return typedKey; }
}

function el(tag, attrs) {
  var e = document.createElement(tag);
  for (var k in attrs || {}) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, String(attrs[k]));
  for (var i = 2; i < arguments.length; i++) {
    var c = arguments[i];
    if (c === undefined || c === null) continue;
    e.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
  }
  return e;
}
function table(headings, rows, emptyText) {
  if (rows.length === 0) return el('p', { class: 'empty' }, emptyText);
  var head = el('tr', {});
  headings.forEach(function (h) { head.appendChild(el('th', {}, h)); });
  var t = el('table', {}, el('thead', {}, head));
  var body = el('tbody', {});
  rows.forEach(function (r) { body.appendChild(r); });
  t.appendChild(body);
  return t;
}

function getJson(path) {
  var key = apiKey();
  var headers = key ? { authorization: 'Bearer ' + key } : {};
  return fetch(path, { headers: headers, cache: 'no-store' }).then(function (res) {
    return res.json().catch(function () { return {}; }).then(function (body) {
      if (!res.ok) {
        var err = new Error(body.error || ('HTTP ' + res.status));
        err.status = res.status;
        throw err;
      }
      return body;
    });
  });
}

function renderNodes(nodes) {
  var rows = nodes.map(function (n) {
    return el('tr', { 'data-node': n.name, 'data-role': n.role },
      el('td', { class: 'name' }, n.name), el('td', { class: 'role' }, n.role), el('td', {}, n.group || ''),
      el('td', {}, el('code', {}, n.http)), el('td', {}, el('code', {}, n.grpc)));
  });
  return table(['node', 'role', 'group', 'http', 'grpc'], rows, 'no live nodes');
}

function renderCollection(name, c) {
  var rows = Object.keys(c.shards).map(function (s) {
    var shard = c.shards[s];
    var replicas = el('td', { class: 'replicas' });
    shard.replicas.forEach(function (r) {
      var leads = r.node === shard.leader;
      replicas.appendChild(el('span', { class: 'replica', 'data-node': r.node, 'data-state': r.state, 'data-leader': leads ? 'true' : 'false' },
        r.node + (leads ? ' (leader)' : '') + ': ' + r.state));
    });
    return el('tr', { class: 'shard', 'data-shard': s },
      el('td', { class: 'name' }, s), el('td', { class: 'range' }, shard.range),
      el('td', { class: 'leader' }, shard.leader || 'none'), replicas);
  });
  return el('div', { class: 'collection', 'data-collection': name },
    el('h3', {}, name, ' ', el('span', { class: 'meta' }, c.numShards + ' shards \\u00d7 ' + c.replicationFactor + ' replicas, router ' + c.router)),
    table(['shard', 'range', 'leader', 'replicas'], rows, 'no shards'));
}

function renderReaders(readers) {
  var rows = readers.map(function (r) {
    var cached = el('td', { class: 'cached-shards' });
    if (r.error) cached.appendChild(el('span', { class: 'empty' }, r.error));
    else if (!r.shards || r.shards.length === 0) cached.appendChild(el('span', { class: 'empty' }, 'none yet'));
    else r.shards.forEach(function (s) {
      cached.appendChild(el('span', { class: 'cached', 'data-shard': s.shard }, s.shard + ' @' + s.snapshot + ' (' + s.docs + ' docs)'));
    });
    var scans = r.scans ? r.scans.running + ' running, ' + r.scans.waiting + ' waiting, ' + r.scans.served + ' served, ' + r.scans.busy + ' busy' : '';
    return el('tr', { 'data-reader': r.name },
      el('td', { class: 'name' }, r.name), el('td', {}, r.group || ''), cached,
      el('td', {}, scans), el('td', {}, r.draining ? 'draining' : ''));
  });
  return table(['reader', 'group', 'cached shards', 'scans', ''], rows, 'no snapshot readers');
}

function replace(id, content) {
  var target = document.getElementById(id);
  target.replaceChildren(content);
}

function setStatus(state, text) {
  var s = document.getElementById('status');
  s.setAttribute('data-state', state);
  s.textContent = text;
}

function refresh() {
  Promise.all([getJson('/api/cluster'), getJson('/api/readers')]).then(function (res) {
    var cluster = res[0], readers = res[1].readers || [];
    replace('nodes', renderNodes(cluster.nodes));
    var names = Object.keys(cluster.collections);
    var box = el('div', {});
    if (names.length === 0) box.appendChild(el('p', { class: 'empty' }, 'no collections'));
    names.forEach(function (n) { box.appendChild(renderCollection(n, cluster.collections[n])); });
    replace('collections', box);
    replace('readers', renderReaders(readers));
    refreshes++;
    document.body.setAttribute('data-refreshes', String(refreshes));
    setStatus('ok', 'updated ' + new Date().toLocaleTimeString() + ', every ' + REFRESH_MS / 1000 + ' s');
  }).catch(function (err) {
    if (err.status === 401) setStatus('auth', 'this node requires an API key: type one into the box, or open this page as /#key=KEY');
    else if (err.status === 403) setStatus('auth', 'the key may not read the cluster view: ' + err.message);
    else setStatus('error', 'cannot read the cluster view (showing the last one): ' + err.message);
  }).then(function () { setTimeout(refresh, REFRESH_MS); });
}

takeKeyFromFragment();
document.getElementById('key-form').addEventListener('submit', function (ev) {
  ev.preventDefault();
  var input = document.getElementById('key');
  typedKey = input.value;
  try { sessionStorage.setItem(KEY_ITEM, typedKey); } catch (e) { /* kept in typedKey */ }
  input.value = '';
});
refresh();
`;

const sha256 = (text: string): string => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  'img-src data:',
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The page, with the serving node's name (the only thing in it not read by the script). */
function page(node: string): string {
  const name = node.replace(/[^A-Za-z0-9._-]/g, '?');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Shardex cluster · ${name}</title>
<style>${STYLE}</style>
</head>
<body>
<header>
<h1>Shardex cluster <span class="meta">via ${name}</span></h1>
<span id="status" data-state="loading">loading…</span>
<form id="key-form"><input id="key" type="password" autocomplete="off" placeholder="API key" aria-label="API key"><button type="submit">Use key</button></form>
</header>
<main>
<section><h2>Live nodes and readers</h2><div id="nodes"></div></section>
<section><h2>Collections</h2><div id="collections"></div></section>
<section><h2>Snapshot readers</h2><div id="readers"></div></section>
</main>
<script>${SCRIPT}</script>
</body>
</html>
`;
}

export const clusterPageRoutes: FastifyPluginAsync = async (app) => {
  // Public: the document holds no cluster data (see above); what it shows needs a key.
  app.get('/', { config: { access: 'public' } }, async (_req, reply) => {
    void reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', CONTENT_SECURITY_POLICY)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('cache-control', 'no-store');
    return page(app.shardex.name);
  });
};
