// Checks the bicep templates without a bicep compiler: every file must parse
// with tree-sitter-bicep (WebAssembly grammar, no native build); the
// Container App (modules/app.bicep, one per gateway) must agree with what the
// image and the gateway binary expect (port, health path, env vars,
// identity); and the isolated tier must hold together: every app scales to
// zero with its own identity and role, the shared pieces exist once.
// Run: npm ci && node --test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Parser, Language } from 'web-tree-sitter';

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const bicepDir = path.join(root, 'bicep');

await Parser.init();
const parser = new Parser();
parser.setLanguage(await Language.load(require.resolve('tree-sitter-bicep/tree-sitter-bicep.wasm')));

function bicepFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? bicepFiles(p) : e.name.endsWith('.bicep') ? [p] : [];
  });
}

// problems lists ERROR and MISSING nodes with their positions.
function problems(node, out = []) {
  if (node.type === 'ERROR' || node.isMissing) {
    out.push(`${node.isMissing ? 'missing ' + node.type : 'syntax error'} at ${node.startPosition.row + 1}:${node.startPosition.column + 1}: ${node.text.slice(0, 60)}`);
  }
  for (const c of node.children) problems(c, out);
  return out;
}

// File is one parsed bicep file with its top-level declarations by name.
class File {
  constructor(p) {
    this.path = p;
    this.tree = parser.parse(fs.readFileSync(p, 'utf8'));
    this.vars = new Map();
    this.params = new Map(); // name → default value node or null
    this.resources = []; // {name, type, body}
    this.modules = []; // {name, file, body}
    this.outputs = new Map();
    for (const d of this.tree.rootNode.namedChildren) {
      const kids = d.namedChildren.filter((c) => c.type !== 'decorators');
      const name = kids[0]?.text;
      switch (d.type) {
        case 'variable_declaration':
          this.vars.set(name, kids.at(-1));
          break;
        case 'parameter_declaration':
          this.params.set(name, kids.length > 2 ? kids.at(-1) : null);
          break;
        case 'resource_declaration':
          this.resources.push({ name, type: unquote(kids[1]), body: body(kids.at(-1)), loop: loopOf(kids.at(-1)), existing: d.children.some((c) => c.type === 'existing') });
          break;
        case 'module_declaration':
          this.modules.push({ name, file: unquote(kids[1]), body: body(kids.at(-1)), loop: loopOf(kids.at(-1)) });
          break;
        case 'output_declaration':
          this.outputs.set(name, kids.at(-1));
          break;
      }
    }
  }

  resource(typePrefix) {
    const r = this.resourcesOf(typePrefix);
    assert.equal(r.length, 1, `${this.path}: want one ${typePrefix}, found ${r.length}`);
    return r[0];
  }

  resourcesOf(typePrefix) {
    return this.resources.filter((x) => x.type.startsWith(typePrefix + '@'));
  }

  module(name) {
    const m = this.modules.find((x) => x.name === name);
    assert.ok(m, `${this.path}: no module ${name}`);
    return m;
  }

  // value evaluates literals, strings with interpolation, and identifiers
  // naming a var or a param's default; anything else stays as its source
  // text in ${…}, so comparisons can still name it.
  value(node) {
    if (!node) return undefined;
    switch (node.type) {
      case 'number':
        return Number(node.text);
      case 'boolean':
        return node.text === 'true';
      case 'string':
        return node.namedChildren
          .map((c) => (c.type === 'interpolation' ? String(this.value(c.namedChildren[0])) : c.text))
          .join('');
      case 'identifier':
        if (this.vars.has(node.text)) return this.value(this.vars.get(node.text));
        if (this.params.get(node.text)) return this.value(this.params.get(node.text));
        return '${' + node.text + '}';
      case 'call_expression': {
        const fn = node.childForFieldName('function').text;
        const args = node.childForFieldName('arguments').namedChildren;
        if (fn === 'string' && args.length === 1) return String(this.value(args[0]));
        return '${' + node.text + '}';
      }
      default:
        return '${' + node.text + '}';
    }
  }
}

function unquote(n) {
  return n.namedChildren.map((c) => c.text).join('');
}

// body is the object of a declaration, also behind `if (cond)` and inside
// `[for … in …: …]`.
function body(n) {
  if (n.type === 'for_statement') return body(n.childForFieldName('body') ?? n.namedChildren.at(-1));
  return n.type === 'if_statement' ? n.namedChildren.find((c) => c.type === 'object') : n;
}

// loopOf describes a `[for (item, index) in source: …]` declaration:
// {item, index, source}; null for one that is not a loop.
function loopOf(n) {
  if (n.type !== 'for_statement') return null;
  const params = n.namedChildren.find((c) => c.type === 'for_loop_parameters');
  const names = params ? params.namedChildren.map((c) => c.text) : [n.namedChildren[0].text];
  const source = n.namedChildren.filter((c) => c.type !== 'for_loop_parameters')[params ? 0 : 1];
  return { item: names[0], index: names[1] ?? null, source: source.text };
}

// prop returns the value node of key in an object node.
function prop(obj, key) {
  if (!obj || obj.type !== 'object') return undefined;
  for (const p of obj.namedChildren) {
    if (p.type !== 'object_property') continue;
    const k = p.namedChildren[0];
    const text = k.type === 'string' ? unquote(k) : k.text;
    if (text === key) return p.namedChildren.at(-1);
  }
  return undefined;
}

function at(obj, dotted) {
  return dotted.split('.').reduce((o, k) => prop(o, k), obj);
}

// items lists the object elements of an array node, also the literal
// arrays inside concat(...).
function items(n) {
  if (!n) return [];
  if (n.type === 'array') return n.namedChildren.filter((c) => c.type === 'object');
  if (n.type === 'call_expression' && n.childForFieldName('function').text === 'concat') {
    return n.childForFieldName('arguments').namedChildren.flatMap(items);
  }
  return [];
}

const files = Object.fromEntries(bicepFiles(bicepDir).map((p) => [path.relative(bicepDir, p), new File(p)]));
const main = files['main.bicep'];
const gw = files[path.join('modules', 'gateway.bicep')]; // the shared pieces, the identities, the app modules
const af = files[path.join('modules', 'app.bicep')]; // one app
const access = files[path.join('modules', 'openai-access.bicep')];
const app = af.resource('Microsoft.App/containerApps');
const appProps = prop(app.body, 'properties');
const container = items(at(appProps, 'template.containers'))[0];
const env = new Map(items(prop(container, 'env')).map((e) => [af.value(prop(e, 'name')), prop(e, 'value') ?? prop(e, 'secretRef')]));
// The app's own identity (existing, made by gateway.bicep), and the shared
// pull identity it pulls the image with.
const identity = af.resourcesOf('Microsoft.ManagedIdentity/userAssignedIdentities').find((r) => prop(r.body, 'name').text === 'identityName');
const pullId = af.resourcesOf('Microsoft.ManagedIdentity/userAssignedIdentities').find((r) => prop(r.body, 'name').text === 'pullIdentityName');
const sharedApp = gw.module('app');
const tenantApps = gw.module('tenantApps');

// params lists a module call's parameters: name → value node.
function params(mod) {
  return new Map(prop(mod.body, 'params').namedChildren.filter((p) => p.type === 'object_property').map((p) => [p.namedChildren[0].text, p.namedChildren.at(-1)]));
}

// What the rest of the repository says the container must match.
const imagePort = Number(fs.readFileSync(path.join(root, 'scripts/image/layout.go'), 'utf8').match(/\bPort\s*=\s*"(\d+)"/)[1]);
const runGo = fs.readdirSync(path.join(root, 'functions/gateway'))
  .filter((f) => f.endsWith('.go') && !f.endsWith('_test.go'))
  .map((f) => fs.readFileSync(path.join(root, 'functions/gateway', f), 'utf8'))
  .join('\n');
const routesGo = fs.readFileSync(path.join(root, 'shared/server/routes.go'), 'utf8');

// replacePairs walks a chain of replace(text, 'placeholder', value) calls and
// returns placeholder → the value's source text, innermost first; the chain
// may start from another var.
function replacePairs(file, node, out = new Map()) {
  if (node?.type === 'identifier' && file.vars.has(node.text)) return replacePairs(file, file.vars.get(node.text), out);
  if (node?.type !== 'call_expression' || node.childForFieldName('function').text !== 'replace') return out;
  const [inner, from, to] = node.childForFieldName('arguments').namedChildren;
  replacePairs(file, inner, out);
  out.set(unquote(from), to.text);
  return out;
}
const configTemplatePath = path.join(bicepDir, 'modules', 'gateway-config.json');
const configTemplate = fs.readFileSync(configTemplatePath, 'utf8');
const configPairs = replacePairs(af, af.vars.get('generatedConfig'));

// The parameters file and the Azure page of the docs (docs/azure.md, the
// README's Azure section before the README was split).
const paramsFile = JSON.parse(fs.readFileSync(path.join(bicepDir, 'main.parameters.json'), 'utf8')).parameters;
const paramEnv = new Map(Object.entries(paramsFile).map(([k, v]) => [k, String(v.value).match(/^\$\{([A-Z0-9_]+)\}$/)?.[1]]));
const readme = fs.readFileSync(path.join(root, 'docs', 'azure.md'), 'utf8');
const azureSection = readme;
const isolatedSection = readme.slice(readme.indexOf('## The isolated tier'), readme.indexOf('\n## ', readme.indexOf('## The isolated tier') + 1));

test('every bicep file parses without errors', () => {
  assert.ok(Object.keys(files).length >= 4, 'bicep files found');
  for (const [name, f] of Object.entries(files)) {
    assert.deepEqual(problems(f.tree.rootNode), [], name);
  }
});

test('the parse check catches broken bicep', () => {
  const t = parser.parse("resource a 'T@1' = {\n  name: \n  properties: { x: [1, }\n}\n");
  assert.ok(problems(t.rootNode).length > 0);
});

test('ingress targets the port the image exposes, over HTTP/1.1', () => {
  const ingress = at(appProps, 'configuration.ingress');
  assert.equal(af.value(prop(ingress, 'targetPort')), imagePort);
  assert.equal(af.value(prop(ingress, 'transport')), 'http');
  assert.equal(af.value(prop(ingress, 'external')), true);
});

test('every app scales to zero on HTTP concurrency: one app definition, minReplicas a literal 0', () => {
  const scale = at(appProps, 'template.scale');
  assert.equal(prop(scale, 'minReplicas').text, '0');
  assert.ok(!af.params.has('minReplicas'), 'no parameter can raise it for one app');
  assert.ok(prop(scale, 'maxReplicas'), 'maxReplicas set');
  const rules = items(prop(scale, 'rules'));
  assert.ok(rules.some((r) => at(r, 'http.metadata.concurrentRequests')), 'an http concurrentRequests rule');
  // Every Container App of the deployment is this one definition.
  for (const [name, f] of Object.entries(files)) {
    if (f !== af) assert.equal(f.resourcesOf('Microsoft.App/containerApps').filter((r) => !r.existing).length, 0, `${name} declares a Container App of its own`);
  }
  assert.deepEqual(gw.modules.filter((m) => m.file === 'app.bicep').map((m) => m.name).sort(), ['app', 'tenantApps']);
});

test('probes hit the gateway health route on its port', () => {
  const route = routesGo.match(/"(\/healthz)":/);
  assert.ok(route, 'shared/server/routes.go serves /healthz');
  const probes = items(prop(container, 'probes'));
  assert.deepEqual(probes.map((p) => af.value(prop(p, 'type'))).sort(), ['Liveness', 'Readiness', 'Startup']);
  for (const p of probes) {
    assert.equal(af.value(at(p, 'httpGet.path')), route[1]);
    assert.equal(af.value(at(p, 'httpGet.port')), imagePort);
  }
  // Readiness asks /healthz the readiness question (keys fetched once)
  // with the header the gateway reads; liveness and startup do not.
  const header = routesGo.match(/ReadinessProbeHeader = "([^"]+)"/);
  assert.ok(header, 'shared/server/routes.go declares ReadinessProbeHeader');
  assert.match(routesGo, /Get\(ReadinessProbeHeader\) == "readiness"/);
  for (const p of probes) {
    const text = prop(p, 'httpGet').text;
    if (af.value(prop(p, 'type')) === 'Readiness') {
      assert.match(text, /httpHeaders: readinessHeaders/, 'the readiness probe sends the header');
      assert.match(fs.readFileSync(path.join(bicepDir, 'modules', 'app.bicep'), 'utf8'), new RegExp(`var readinessHeaders = \\[ \\{ name: '${header[1]}', value: 'readiness' \\} \\]`));
    } else {
      assert.doesNotMatch(text, /httpHeaders/, 'liveness and startup stay liveness');
    }
  }
});

test('the gateway listens on the port the ingress targets', () => {
  assert.match(runGo, /getenv\("GATEWAY_CONFIG"\)/, 'functions/gateway reads GATEWAY_CONFIG');
  assert.ok(env.has('GATEWAY_CONFIG'), 'container env sets GATEWAY_CONFIG');
  // With no listen in the config (the generated one has none), the
  // gateway listens on $PORT, else $CONTAINER_APP_PORT (Container Apps sets
  // it to the ingress target port): config.ListenAddr. The image sets PORT;
  // the template sets neither, so one statement holds: the container
  // listens on the target port.
  const configGo = fs.readFileSync(path.join(root, 'shared/config/config.go'), 'utf8');
  assert.match(configGo, /\[\]string\{"PORT", "CONTAINER_APP_PORT"\}/, 'config reads PORT, then CONTAINER_APP_PORT, for an absent listen');
  const genConfig = fs.readFileSync(path.join(root, 'bicep/modules/gateway-config.json'), 'utf8');
  assert.ok(!/"listen"/.test(genConfig), 'the generated config names no listen, so the port variables decide');
  assert.ok(!env.has('PORT') && !env.has('CONTAINER_APP_PORT'), 'the template leaves PORT to the image and CONTAINER_APP_PORT to the platform');
  const imageEnvPort = fs.readFileSync(path.join(root, 'scripts/image/layout.go'), 'utf8').match(/"PORT=" \+ Port/);
  assert.ok(imageEnvPort, 'scripts/image sets PORT to its exposed port');
  assert.equal(af.value(prop(at(appProps, 'configuration.ingress'), 'targetPort')), imagePort);
});

test('GATEWAY_CONFIG names the file the secret volume mounts', () => {
  const mount = items(prop(container, 'volumeMounts'))[0];
  const volName = af.value(prop(mount, 'volumeName'));
  const vol = items(at(appProps, 'template.volumes')).find((v) => af.value(prop(v, 'name')) === volName);
  assert.ok(vol, `volume ${volName} declared`);
  assert.equal(af.value(prop(vol, 'storageType')), 'Secret');
  const file = items(prop(vol, 'secrets'))[0];
  assert.equal(af.value(env.get('GATEWAY_CONFIG')), `${af.value(prop(mount, 'mountPath'))}/${af.value(prop(file, 'path'))}`);
  const secretRef = af.value(prop(file, 'secretRef'));
  assert.match(af.vars.get('configSecret').text, new RegExp(`name: '${secretRef}'`), 'the config secret exists under that name');
});

test('one identity per app: the app runs as it, AZURE_CLIENT_ID is its client id, its roles go to its principal', () => {
  const id = identity.name;
  assert.ok(identity.existing && pullId?.existing, 'app.bicep uses the identities gateway.bicep made');
  const uai = at(app.body, 'identity.userAssignedIdentities');
  assert.equal(af.value(at(app.body, 'identity.type')), 'UserAssigned');
  assert.deepEqual(uai.namedChildren.map((p) => p.namedChildren[0].text), [`'\${${id}.id}'`, `'\${${pullId.name}.id}'`]);
  assert.equal(env.get('AZURE_CLIENT_ID').text, `${id}.properties.clientId`);
  const mod = af.modules.find((m) => m.file === 'openai-access.bicep');
  assert.ok(mod, 'app.bicep calls openai-access.bicep');
  assert.equal(at(mod.body, 'params.principalId').text, `${id}.properties.principalId`);
  assert.equal(af.resourcesOf('Microsoft.Authorization/roleAssignments').length, 0, 'app.bicep grants no AcrPull: the pull identity has it');
  // The generated config's entra client_id (backend and Redis) and the Redis
  // username are the same identity.
  assert.equal(configPairs.get('__IDENTITY_CLIENT_ID__'), `${id}.properties.clientId`);
  assert.match(af.vars.get('sharedStore').text, new RegExp(`client_id: ${id}\\.properties\\.clientId`));
  assert.match(af.vars.get('sharedStore').text, new RegExp(`username: ${id}\\.properties\\.principalId`));
  // Key Vault references use it too; registry pulls use the shared pull
  // identity (the next test).
  for (const r of items(at(appProps, 'configuration.registries'))) {
    assert.equal(prop(r, 'identity').text, `${pullId.name}.id`);
  }
});

test('every app pulls with the one pull identity, granted AcrPull once before any app exists', () => {
  const ids = gw.resourcesOf('Microsoft.ManagedIdentity/userAssignedIdentities');
  const pull = ids.find((r) => /'id-pull-/.test(prop(r.body, 'name').text));
  assert.ok(pull && !pull.loop, 'one pull identity, outside any loop');
  const grants = gw.resourcesOf('Microsoft.Authorization/roleAssignments');
  assert.equal(grants.length, 1, 'one AcrPull grant');
  const g = grants[0];
  assert.equal(g.loop, null);
  assert.equal(at(g.body, 'properties.principalId').text, `${pull.name}.properties.principalId`);
  assert.equal(prop(g.body, 'scope').text, gw.resource('Microsoft.ContainerRegistry/registries').name);
  assert.match(at(g.body, 'properties.roleDefinitionId').text, /acrPullRoleId/);
  assert.equal(gw.value(gw.vars.get('acrPullRoleId')), '7f951dda-4ed3-4680-a7ca-43fe172d538d');
  for (const m of [sharedApp, tenantApps]) {
    assert.equal(params(m).get('pullIdentityName').text, `${pull.name}.name`, `${m.name} pulls with the pull identity`);
    assert.match(prop(m.body, 'dependsOn').text, new RegExp(`\\b${g.name}\\b`), `${m.name} waits for the grant`);
  }
  // A tenant's own identity gets no registry role: nothing of a new tenant
  // races a grant made in its own deployment.
  for (const f of Object.values(files)) {
    for (const r of f.resourcesOf('Microsoft.Authorization/roleAssignments')) {
      if (f !== gw) assert.doesNotMatch(r.body.text, /acrPull/i, `${f.path}: an AcrPull grant outside gateway.bicep`);
    }
  }
});

test('each app gets an identity of its own, and its Redis access goes to that identity', () => {
  const ids = gw.resourcesOf('Microsoft.ManagedIdentity/userAssignedIdentities').filter((r) => !/'id-pull-/.test(prop(r.body, 'name').text));
  const shared = ids.find((r) => !r.loop);
  const perTenant = ids.find((r) => r.loop);
  assert.ok(shared && perTenant && ids.length === 2, 'one shared identity, one per isolated tenant (besides the pull identity)');
  assert.equal(perTenant.loop.source, 'isolated');
  assert.match(prop(perTenant.body, 'name').text, new RegExp(`\\$\\{${perTenant.loop.item}\\.name\\}`), 'named by the tenant');
  assert.equal(params(sharedApp).get('identityName').text, `${shared.name}.name`);
  assert.equal(tenantApps.loop.source, 'isolated');
  assert.equal(params(tenantApps).get('identityName').text, `${perTenant.name}[${tenantApps.loop.index}].name`);
  const apa = gw.resourcesOf('Microsoft.Cache/redisEnterprise/databases/accessPolicyAssignments');
  assert.equal(apa.length, 2);
  const sharedApa = apa.find((r) => !r.loop);
  const tenantApa = apa.find((r) => r.loop);
  assert.equal(at(sharedApa.body, 'properties.user.objectId').text, `${shared.name}.properties.principalId`);
  assert.equal(tenantApa.loop.source, 'isolated');
  assert.equal(at(tenantApa.body, 'properties.user.objectId').text, `${perTenant.name}[${tenantApa.loop.index}].properties.principalId`);
  assert.match(gw.tree.rootNode.text, /@batchSize\(1\)\nresource tenantRedisAccess /, 'one database change at a time');
  assert.match(prop(tenantApa.body, 'name').text, new RegExp(`\\$\\{uniqueString\\(${tenantApa.loop.item}\\.name\\)\\}`));
});

test('each app\'s role is scoped to what its config calls: the one account, for its own principal', () => {
  const mod = af.modules.find((m) => m.file === 'openai-access.bicep');
  assert.equal(at(mod.body, 'params.accountName').text, 'openAiAccountName');
  assert.equal(at(mod.body, 'scope').text, 'resourceGroup(openAiResourceGroup)');
  // The config's endpoint is that module's output: the account the role is on.
  assert.equal(configPairs.get('__OPENAI_ENDPOINT__') ?? replacePairs(af, af.vars.get('configWithText')).get('__OPENAI_ENDPOINT__'), `${mod.name}.outputs.endpoint`);
  // The role assignment's name is unique per principal: two apps' roles on
  // one account never collide.
  const ra = access.resource('Microsoft.Authorization/roleAssignments');
  assert.match(prop(ra.body, 'name').text, /guid\(account\.id, principalId, openAiUserRoleId\)/);
  // Each tenant app names its own account (default the shared one).
  const tp = params(tenantApps);
  const item = tenantApps.loop.item;
  assert.equal(tp.get('openAiAccountName').text, `${item}.openAiAccountName`);
  assert.equal(tp.get('openAiResourceGroup').text, `${item}.openAiResourceGroup`);
  assert.match(gw.vars.get('isolated').text, /openAiAccountName: openAiAccountName, openAiResourceGroup: openAiResourceGroup/);
  // Its pool holds its models only.
  assert.equal(tp.get('modelNames').text, `${item}.models`);
  assert.equal(tp.get('models').text, `${item}.deployments`);
  assert.match(af.vars.get('poolModels').text, /^empty\(modelNames\) \? models : toObject\(modelNames, m => m, m => models\[m\]\)$/);
  assert.equal(configPairs.get('"__MODELS__"'), 'string(poolModels)');
});

test('the role is Cognitive Services OpenAI User, on the account, for the principal passed in', () => {
  const ra = access.resource('Microsoft.Authorization/roleAssignments');
  const props = prop(ra.body, 'properties');
  assert.equal(prop(props, 'principalId').text, 'principalId');
  assert.match(prop(props, 'roleDefinitionId').text, /openAiUserRoleId/);
  assert.equal(access.value(access.vars.get('openAiUserRoleId')), '5e0bd9bd-7b93-4f28-af87-19fc36ad61bd');
  assert.equal(prop(ra.body, 'scope').text, access.resources.find((r) => r.type.startsWith('Microsoft.CognitiveServices/accounts@')).name);
});

test('the shared pieces exist once: logs, environment, registry, Redis; every app joins them', () => {
  for (const type of ['Microsoft.OperationalInsights/workspaces', 'Microsoft.App/managedEnvironments', 'Microsoft.ContainerRegistry/registries', 'Microsoft.Cache/redisEnterprise', 'Microsoft.Cache/redisEnterprise/databases']) {
    const r = gw.resource(type);
    assert.equal(r.loop, null, `${type} is not in a loop`);
    for (const [name, f] of Object.entries(files)) {
      if (f !== gw) assert.ok(f.resourcesOf(type).every((x) => x.existing), `${name} declares its own ${type}`);
    }
  }
  const envName = gw.resource('Microsoft.App/managedEnvironments').name;
  const registryName = gw.resource('Microsoft.ContainerRegistry/registries').name;
  for (const m of [sharedApp, tenantApps]) {
    const p = params(m);
    assert.equal(p.get('environmentId').text, `${envName}.id`, `${m.name}: the shared environment`);
    assert.equal(p.get('registryName').text, `${registryName}.name`, `${m.name}: the shared registry`);
    assert.equal(p.get('redisUrl').text, 'redisUrl', `${m.name}: the shared store`);
    assert.equal(p.get('image').text, 'image', `${m.name}: the one image`);
    assert.equal(p.get('enableRedis').text, 'enableRedis');
  }
  // One namespace per app in the shared store.
  assert.equal(params(sharedApp).get('keyPrefix').text, "'llmgw:'");
  assert.equal(params(tenantApps).get('keyPrefix').text, `'llmgw:\${${tenantApps.loop.item}.name}:'`);
  assert.match(af.vars.get('sharedStore').text, /key_prefix: keyPrefix/);
});

test('tenants are keyed by name, never by position: adding or removing one renames nothing else', () => {
  const loops = [...gw.resources, ...gw.modules].filter((r) => r.loop);
  assert.deepEqual(loops.map((r) => r.name).sort(), ['tenantApps', 'tenantIdentities', 'tenantRedisAccess']);
  for (const r of loops) {
    assert.equal(r.loop.source, 'isolated', `${r.name} loops over the isolated tenants`);
    const name = prop(r.body, 'name').text;
    assert.match(name, new RegExp(`${r.loop.item}\\.name`), `${r.name}: name ${name} comes from the tenant's name`);
    if (r.loop.index) assert.doesNotMatch(name, new RegExp(`\\$\\{${r.loop.index}\\}`), `${r.name}: name ${name} uses the position`);
  }
  assert.match(gw.vars.get('isolatedAppNames').text, /'ca-\$\{t\.name\}'/);
  assert.doesNotMatch(params(tenantApps).get('tags').text, /azd-service-name/, 'azd finds exactly one app for the gateway service');
  assert.match(params(sharedApp).get('tags').text, /'azd-service-name': 'gateway'/);
});

test('Consumption resources: memory is twice the vCPUs', () => {
  const cpu = Number(main.value(main.params.get('cpu')));
  const mem = main.value(main.params.get('memory'));
  assert.equal(cpu, 1);
  assert.equal(mem, `${cpu * 2}Gi`);
});

test('main.bicep passes every gateway.bicep parameter and nothing else', () => {
  const mod = main.modules.find((m) => m.file === 'modules/gateway.bicep');
  const passed = prop(mod.body, 'params').namedChildren.map((p) => p.namedChildren[0].text).sort();
  assert.deepEqual(passed, [...gw.params.keys()].sort());
});

test('every app.bicep parameter without a default is passed by both module calls', () => {
  for (const m of [sharedApp, tenantApps]) {
    const p = params(m);
    for (const [name, def] of af.params) {
      if (def === null) assert.ok(p.has(name), `${m.name} does not pass ${name}`);
    }
    for (const name of p.keys()) assert.ok(af.params.has(name), `${m.name} passes unknown ${name}`);
  }
});

test('azd: azure.yaml, parameters file and the service tag agree; the hook moves tenant apps to the deployed image', () => {
  const yaml = fs.readFileSync(path.join(root, 'azure.yaml'), 'utf8');
  assert.match(yaml, /^\s+path: bicep$/m);
  assert.match(yaml, /^\s+module: main$/m);
  assert.match(yaml, /^ {2}gateway:\n(?: {4}.*\n)*? {4}host: containerapp$/m);
  assert.match(yaml, /^ {4}hooks:\n {6}postdeploy:\n {8}posix:\n {10}shell: sh\n {10}run: \.\/scripts\/azd\/tenant-images\.sh\n {8}windows:\n {10}shell: pwsh\n {10}run: \.\/scripts\/azd\/tenant-images\.ps1$/m);
  for (const f of ['tenant-images.sh', 'tenant-images.ps1']) {
    const script = fs.readFileSync(path.join(root, 'scripts/azd', f), 'utf8');
    for (const v of ['SERVICE_GATEWAY_IMAGE_NAME', 'GATEWAY_TENANT_APPS', 'AZURE_RESOURCE_GROUP']) assert.match(script, new RegExp(v), `${f} reads ${v}`);
    assert.match(script, /az containerapp update/);
  }
  assert.ok(main.outputs.has('GATEWAY_TENANT_APPS') && main.outputs.has('AZURE_RESOURCE_GROUP'), 'the hook\'s inputs are outputs');
  assert.match(main.outputs.get('GATEWAY_TENANT_APPS').text, /gateway\.outputs\.tenantAppNames/);
  assert.match(gw.outputs.get('tenantAppNames').text, /^isolatedAppNames$/);
  assert.equal(params(tenantApps).get('appName').text, `isolatedAppNames[${tenantApps.loop.index}]`);
  const params_ = JSON.parse(fs.readFileSync(path.join(bicepDir, 'main.parameters.json'), 'utf8')).parameters;
  for (const name of Object.keys(params_)) assert.ok(main.params.has(name), `main.parameters.json sets unknown param ${name}`);
  for (const [name, def] of main.params) {
    if (def === null) assert.ok(params_[name], `required param ${name} missing from main.parameters.json`);
  }
  for (const out of ['GATEWAY_URL', 'GATEWAY_TENANT_URLS', 'AZURE_CONTAINER_REGISTRY_ENDPOINT']) assert.ok(main.outputs.has(out), `output ${out}`);
});

test('every main.parameters.json entry is a main.bicep parameter and the reverse, each from one azd variable', () => {
  assert.deepEqual([...paramEnv.keys()].sort(), [...main.params.keys()].sort());
  for (const [name, v] of paramEnv) {
    // A bare ${VAR}: azd leaves the parameter out while VAR is unset, so the
    // bicep default applies (a ${VAR=} default would pass '' instead).
    assert.ok(v, `${name}: want "\${VAR}", got ${JSON.stringify(paramsFile[name].value)}`);
  }
  assert.equal(paramEnv.get('gatewayExists'), 'SERVICE_GATEWAY_RESOURCE_EXISTS', 'azd says whether the shared app exists');
  assert.equal(paramEnv.get('gatewayImage'), 'GATEWAY_IMAGE');
  // The image azd deployed last is never fed back: after azd down it names
  // an image in a registry that no longer exists.
  assert.ok(![...paramEnv.values()].includes('SERVICE_GATEWAY_IMAGE_NAME'), 'no parameter reads SERVICE_GATEWAY_IMAGE_NAME');
  assert.equal(paramEnv.get('environmentName'), 'AZURE_ENV_NAME');
  assert.equal(paramEnv.get('location'), 'AZURE_LOCATION');
});

test('the README names every azd variable the parameters read, and every one it tells users to set is wired', () => {
  assert.ok(azureSection.length > 1000, 'README has the Azure section');
  const wired = new Set(paramEnv.values());
  for (const v of wired) assert.match(azureSection, new RegExp(`\\b${v}\\b`), `README's Azure section does not mention ${v}`);
  const told = [...azureSection.matchAll(/azd env set ([A-Z0-9_]+)/g)].map((m) => m[1]);
  assert.ok(told.length >= 3, 'README tells users what to set');
  for (const v of told) assert.ok(wired.has(v), `README says "azd env set ${v}", but no parameter reads it`);
});

test('the config template: valid JSON, every placeholder filled by app.bicep and nothing else', () => {
  const doc = JSON.parse(configTemplate);
  // No listen: the image's PORT (its exposed port) decides, and an explicit
  // listen would always win over it.
  assert.equal(doc.listen, undefined, 'the generated config names no listen');
  const inTemplate = new Set([...configTemplate.matchAll(/__[A-Z_]+__/g)].map((m) => m[0]));
  const filled = [...configPairs.keys()];
  assert.deepEqual(filled.map((p) => p.replaceAll('"', '')).sort(), [...inTemplate].sort());
  for (const p of filled) assert.ok(configTemplate.includes(p), `${p} is not in the template as written`);
  // A placeholder replaced with its quotes takes JSON (string() of an array
  // or object); one replaced without them takes text inside a JSON string.
  for (const [ph, value] of configPairs) {
    assert.equal(ph.startsWith('"'), value.startsWith('string('), `${ph} ← ${value}`);
  }
  assert.match(af.vars.get('configSecret').text, /generatedConfig/);
  assert.match(main.params.get('entraTenantId')?.text ?? '', /tenant\(\)\.tenantId/, 'the directory defaults to the subscription\'s');
  assert.match(gw.vars.get('authIssuer').text, /environment\(\)\.authentication\.loginEndpoint\}\{tenantid\}\/v2\.0'$/, 'Entra v2.0 issuer of any directory');
  assert.match(gw.vars.get('authJwksUrl').text, /environment\(\)\.authentication\.loginEndpoint\}common\/discovery\/v2\.0\/keys'$/, 'Entra\'s common keys');
  assert.match(gw.vars.get('authAudiences').text, /^\[apiClientId, /, 'the client ID (v2.0 aud) is an audience');
  // Every app's issuer, keys and audiences are these.
  for (const m of [sharedApp, tenantApps]) {
    for (const k of ['authIssuer', 'authJwksUrl', 'authAudiences', 'requiredRoles', 'requiredScopes']) assert.equal(params(m).get(k).text, k, `${m.name}.${k}`);
  }
  // A tenant app's table is its own directory only.
  assert.match(params(tenantApps).get('tenantRows').text, new RegExp(`^\\[\\{ id: ${tenantApps.loop.item}\\.id, `));
});

test('the image: pinned, else the one the shared app runs, else the placeholder, which serves the same port and probes', () => {
  assert.equal(main.value(main.params.get('gatewayImage')), '');
  assert.equal(main.value(main.params.get('gatewayExists')), false);
  assert.equal(prop(container, 'image').text, 'containerImage');
  assert.match(af.vars.get('containerImage').text, /^empty\(image\) \? placeholderImage : image$/);
  assert.equal(gw.vars.get('image').text, '!empty(gatewayImage) ? gatewayImage : liveImage.outputs.image');
  const live = gw.module('liveImage');
  assert.equal(live.file, 'live-image.bicep');
  assert.equal(live.loop, null);
  assert.equal(at(live.body, 'params.exists').text, 'gatewayExists');
  assert.equal(at(live.body, 'params.appName').text, 'sharedAppName');
  assert.equal(params(sharedApp).get('appName').text, 'sharedAppName', 'it reads the shared app');
  const lf = files[path.join('modules', 'live-image.bicep')];
  const existing = lf.resource('Microsoft.App/containerApps');
  assert.ok(existing.existing);
  assert.equal(lf.outputs.get('image').text, `exists ? ${existing.name}.properties.template.containers[0].image : ''`);
  assert.equal(items(at(appProps, 'template.containers')).length, 1, 'the gateway is the app\'s first and only container');
  // azd deploy replaces only the image, so the placeholder must listen on
  // the target port and answer the health probes: images known to.
  const known = { 'mcr.microsoft.com/dotnet/samples:aspnetapp': { port: 8080, health: '/healthz' } };
  const ph = known[af.value(af.vars.get('placeholderImage'))];
  assert.ok(ph, `placeholder ${af.value(af.vars.get('placeholderImage'))} is not known to serve port ${imagePort}`);
  assert.equal(ph.port, imagePort);
  assert.equal(ph.health, af.value(af.vars.get('healthPath')));
  // No probe or port depends on which image runs.
  assert.doesNotMatch(at(appProps, 'configuration.ingress').text + prop(container, 'probes').text, /containerImage|placeholder|image/);
});

test('optional pieces declare nothing when off; deployments are unique per environment', () => {
  for (const [name, f] of Object.entries(files)) {
    for (const d of f.tree.rootNode.namedChildren) {
      // A conditional existing resource still has its name evaluated: it
      // must be a parameter that cannot be empty.
      const cond = d.text.match(/^resource\s+\w+\s+'[^']+'\s+existing\s*=\s*if\b[\s\S]*?\n\s+name:\s*(\w+)/);
      if (cond) assert.ok(/@minLength\(1\)/.test(f.tree.rootNode.text.split(`param ${cond[1]} `)[0].split('\n\n').at(-1)), `${name}: a conditional existing resource named by ${cond[1]}, which may be empty`);
    }
    for (const m of f.modules) {
      const n = prop(m.body, 'name');
      assert.ok(n?.type === 'string' && /\$\{(token|environmentName)\}/.test(n.text), `${name}: module ${m.name} name ${n?.text} is not unique per environment`);
      if (m.loop) assert.match(n.text, new RegExp(`\\$\\{${m.loop.item}\\.name\\}`), `${name}: module ${m.name} name is not unique per tenant`);
    }
  }
  for (const m of af.modules) assert.match(prop(m.body, 'name').text, /\$\{appName\}/, `app.bicep: module ${m.name} name is not unique per app`);
  const kv = gw.modules.find((m) => m.file === 'keyvault-access.bicep');
  assert.ok(kv, 'Key Vault access is a module');
  assert.match(gw.tree.rootNode.text, /module keyVaultAccess 'keyvault-access\.bicep' = if \(!empty\(keyVaultName\)\)/);
  assert.equal(main.params.get('openAiResourceGroup'), null, 'openAiResourceGroup is required (no default)');
  assert.ok(!params(tenantApps).has('keyVaultName') && !params(tenantApps).has('gatewayConfig'), 'tenant apps run the generated config only');
});

test('Redis is Azure Managed Redis with Entra access for each app identity, keys off', () => {
  const types = gw.resources.map((r) => r.type.split('@')[0]);
  assert.ok(!types.includes('Microsoft.Cache/redis'), 'no Azure Cache for Redis (being retired)');
  const cluster = gw.resource('Microsoft.Cache/redisEnterprise');
  const db = gw.resource('Microsoft.Cache/redisEnterprise/databases');
  assert.equal(prop(db.body, 'parent').text, cluster.name);
  for (const apa of gw.resourcesOf('Microsoft.Cache/redisEnterprise/databases/accessPolicyAssignments')) {
    assert.equal(prop(apa.body, 'parent').text, db.name);
    const n = prop(apa.body, 'name');
    assert.match(apa.loop ? n.text.replace(/\$\{uniqueString\([^)]*\)\}/, 'x0123456789ab') : gw.value(n), /^'?[A-Za-z0-9]{1,60}'?$/);
    assert.equal(gw.value(at(apa.body, 'properties.accessPolicyName')), 'default');
  }
  assert.equal(gw.value(at(db.body, 'properties.accessKeysAuthentication')), 'Disabled');
  assert.equal(gw.value(at(db.body, 'properties.clusteringPolicy')), 'EnterpriseCluster', 'one endpoint for a non-cluster client');
  assert.match(gw.vars.get('redisUrl').text, /rediss:\/\//);
  assert.match(af.vars.get('redisSecrets').text, /value: redisUrl/);
});

test('the README links the Dockerfile instead of copying it', () => {
  assert.doesNotMatch(readme, /```dockerfile/);
  assert.match(azureSection, /\]\(\.\.\/Dockerfile\)/);
  assert.doesNotMatch(fs.readFileSync(path.join(root, 'Dockerfile'), 'utf8'), /^```/m);
});

// evaluate computes a bicep expression of literals, parameters (scope),
// operators, lambdas and the few ARM functions below, the way ARM would, so
// that a test can run a user-defined function of the templates on inputs.
const armFunctions = {
  length: (x) => x.length,
  contains: (x, v) => (typeof x === 'string' ? x.includes(v) : Array.isArray(x) ? x.includes(v) : Object.hasOwn(x, v)),
  take: (x, n) => x.slice(0, Math.max(0, n)),
  endsWith: (x, v) => x.endsWith(v),
  startsWith: (x, v) => x.startsWith(v),
  empty: (x) => (typeof x === 'string' || Array.isArray(x) ? x.length === 0 : Object.keys(x ?? {}).length === 0),
  range: (start, count) => Array.from({ length: count }, (_, i) => start + i),
  substring: (x, i, n = x.length - i) => {
    if (i < 0 || i + n > x.length) throw new Error(`substring(${JSON.stringify(x)}, ${i}, ${n}) is out of range`);
    return x.slice(i, i + n);
  },
  filter: (xs, f) => xs.filter((x) => f(x)),
  map: (xs, f) => xs.map((x) => f(x)),
  toLower: (x) => x.toLowerCase(),
  split: (x, sep) => x.split(sep),
  trim: (x) => x.trim(),
  indexOf: (x, v) => x.indexOf(v),
  join: (xs, sep) => xs.join(sep),
  union: (...xs) => (Array.isArray(xs[0]) ? [...new Set(xs.flat())] : Object.assign({}, ...xs)),
  uriComponentToString: (x) => decodeURIComponent(x),
  fail: (msg) => {
    throw new DeploymentFailed(msg);
  },
};

// DeploymentFailed is what fail() raises: the deployment stops with msg,
// before any resource that depends on the failing value. TemplateError is
// ARM's own expression error (InvalidTemplate), raised where the value is
// used: in the middle of a deployment.
class DeploymentFailed extends Error {}
class TemplateError extends Error {}
function evaluate(node, scope) {
  switch (node.type) {
    case 'number':
      return Number(node.text);
    case 'boolean':
      return node.text === 'true';
    case 'string':
      return node.namedChildren.map((c) => (c.type === 'interpolation' ? String(evaluate(c.namedChildren[0], scope)) : c.type === 'escape_sequence' ? c.text.slice(1) : c.text)).join('');
    case 'identifier':
      assert.ok(Object.hasOwn(scope, node.text), `unknown identifier ${node.text}`);
      return scope[node.text];
    case 'parenthesized_expression':
      return evaluate(node.namedChildren[0], scope);
    case 'member_expression': {
      // ARM fails the deployment on a property that does not exist.
      const obj = evaluate(node.namedChildren[0], scope);
      const key = node.namedChildren[1].text;
      if (obj === null || typeof obj !== 'object' || !Object.hasOwn(obj, key)) throw new TemplateError(`The language expression property '${key}' doesn't exist`);
      return obj[key];
    }
    case 'null':
      return null;
    case 'array':
      return node.namedChildren.map((c) => evaluate(c, scope));
    case 'object':
      return Object.fromEntries(node.namedChildren.filter((c) => c.type === 'object_property').map((p) => {
        const k = p.namedChildren[0];
        return [k.type === 'string' ? unquote(k) : k.text, evaluate(p.namedChildren.at(-1), scope)];
      }));
    case 'unary_expression':
      assert.equal(node.child(0).text, '!');
      return !evaluate(node.namedChildren[0], scope);
    case 'binary_expression': {
      const op = node.children.find((c) => !c.isNamed).text;
      const l = () => evaluate(node.childForFieldName('left'), scope);
      const r = () => evaluate(node.childForFieldName('right'), scope);
      switch (op) {
        case '&&': return l() && r();
        case '||': return l() || r();
        case '==': return l() === r();
        case '!=': return l() !== r();
        case '>=': return l() >= r();
        case '<=': return l() <= r();
        case '>': return l() > r();
        case '<': return l() < r();
        case '+': return l() + r();
        default: throw new Error(`operator ${op}`);
      }
    }
    case 'ternary_expression': {
      const [c, a, b] = node.namedChildren;
      return evaluate(c, scope) ? evaluate(a, scope) : evaluate(b, scope);
    }
    case 'lambda_expression': {
      const ps = node.namedChildren.slice(0, -1).flatMap((c) => (c.type === 'identifier' ? [c.text] : c.namedChildren.map((x) => x.text)));
      return (...args) => evaluate(node.namedChildren.at(-1), { ...scope, ...Object.fromEntries(ps.map((p, i) => [p, args[i]])) });
    }
    case 'call_expression': {
      const fn = node.childForFieldName('function').text;
      const args = node.childForFieldName('arguments').namedChildren.map((a) => evaluate(a, scope));
      if (scope[fn]) return scope[fn](...args);
      assert.ok(armFunctions[fn], `function ${fn} is not evaluated here`);
      return armFunctions[fn](...args);
    }
    default:
      throw new Error(`cannot evaluate ${node.type}: ${node.text.slice(0, 60)}`);
  }
}

// userFunction returns a bicep user-defined function as a JS function.
function userFunction(file, name) {
  const d = file.tree.rootNode.namedChildren.find((c) => c.type === 'user_defined_function' && c.childForFieldName('name').text === name);
  assert.ok(d, `${file.path} has no func ${name}`);
  const ps = d.namedChildren.find((c) => c.type === 'parameters').namedChildren.map((p) => p.namedChildren[0].text);
  const bodyNode = d.namedChildren.at(-1);
  // The file's other functions are callable from this one, as in bicep.
  const others = () => Object.fromEntries(file.tree.rootNode.namedChildren
    .filter((c) => c.type === 'user_defined_function' && c.childForFieldName('name').text !== name)
    .map((c) => [c.childForFieldName('name').text, (...a) => userFunction(file, c.childForFieldName('name').text)(...a)]));
  return (...args) => evaluate(bodyNode, { ...others(), ...Object.fromEntries(ps.map((p, i) => [p, args[i]])) });
}

// The tenant-name rule as docs/azure.md states it: lowercase letters, digits
// and single hyphens, starting with a letter and ending with a letter or
// digit, at most 29 characters.
const readmeRule = (n) => /^[a-z](-?[a-z0-9])*$/.test(n) && n.length <= 29;
const nameCases = ['a', 'fabrikam', 'north-wind2', 'a1-b2-c3', 'x'.repeat(29), 'x'.repeat(30), '', 'Fabrikam', 'fabri--kam', '-a', 'a-', '1abc', 'ab_c', 'a.b', 'a b', 'ä', 'tenant-' + 'y'.repeat(22), 'tenant-' + 'y'.repeat(23)];

test('tenant names: bicep checks the README\'s rule before any tenant resource exists', () => {
  const isTenantName = userFunction(main, 'isTenantName');
  for (const n of nameCases) assert.equal(isTenantName(n), readmeRule(n), `isTenantName(${JSON.stringify(n)})`);
  // Every accepted name makes a valid Container App name (ca-{name}: at
  // most 32, lowercase alphanumerics and single hyphens, letter first).
  for (const n of nameCases.filter(readmeRule)) assert.match(`ca-${n}`, /^(?=.{2,32}$)[a-z](-?[a-z0-9])*$/);
  // The parameter's type bounds the name's length as the rule does, so a
  // name too long fails at the parameter check, before anything runs.
  const ty = main.tree.rootNode.namedChildren.find((c) => c.type === 'type_declaration' && c.namedChildren[0].text === 'isolatedTenant');
  assert.ok(ty, 'main.bicep declares the isolatedTenant type');
  assert.match(ty.text, /@minLength\(1\)\s*@maxLength\(29\)\s*(@description\([^\n]*\)\s*)?name: string/);
  assert.match(main.tree.rootNode.text, /param isolatedTenants isolatedTenant\[\] = \[\]/);
  // The gateway module gets the checked list only: the check runs before
  // its first resource, and a repeated name fails too.
  assert.equal(at(main.module('gateway').body, 'params.isolatedTenants').text, 'checkedTenants');
  const checked = main.vars.get('checkedTenants').text;
  assert.match(checked, /length\(union\(tenantNames, \[\]\)\) != length\(tenantNames\)\s*\? fail\(/);
  assert.match(checked, /map\(isolatedTenants, t => !isTenantName\(t\.name\)\s*\? fail\(/);
  // The README states the same rule, and its examples follow it.
  assert.match(isolatedSection, /lowercase letters, digits and single hyphens, starting with a letter, ending with a letter or digit, at most 29 characters/);
  for (const m of readme.matchAll(/"name": "([^"]+)"/g)) assert.ok(readmeRule(m[1]), `README example tenant ${m[1]}`);
});

test('tenant names: the Lambda stack\'s TenantName takes the same rule', () => {
  const tmpl = fs.readFileSync(path.join(root, 'infra', 'template.yaml'), 'utf8');
  const block = tmpl.match(/\n {2}TenantName:\n((?: {4}.*\n)+)/)[1];
  const pattern = new RegExp(block.match(/AllowedPattern: "([^"]+)"/)[1]);
  const max = Number(block.match(/MaxLength: (\d+)/)[1]);
  for (const n of nameCases) {
    if (n === '') continue; // empty: the shared stack
    assert.equal(pattern.test(n) && n.length <= max, readmeRule(n), `TenantName ${JSON.stringify(n)}`);
  }
  assert.ok(pattern.test(''), 'empty TenantName: the shared stack');
});

test('token scopes come from the cloud the deployment runs in, and reach every app\'s config', () => {
  const suffixes = main.vars.get('cloudSuffixes').text;
  for (const [cloud, suffix] of [['AzureCloud', 'azure.com'], ['AzureUSGovernment', 'azure.us'], ['AzureChinaCloud', 'azure.cn']]) {
    assert.match(suffixes, new RegExp(`${cloud}: '${suffix.replace('.', '\\.')}'`));
  }
  assert.match(main.vars.get('cloudSuffix').text, /environment\(\)\.name/);
  assert.equal(main.vars.get('openAiScope').text, "empty(openAiTokenScope) ? 'https://cognitiveservices.${cloudSuffix}/.default' : openAiTokenScope");
  assert.equal(main.vars.get('redisScope').text, "empty(redisTokenScope) ? 'https://redis.${cloudSuffix}/.default' : redisTokenScope");
  assert.equal(at(main.module('gateway').body, 'params.openAiTokenScope').text, 'openAiScope');
  assert.equal(at(main.module('gateway').body, 'params.redisTokenScope').text, 'redisScope');
  for (const m of [sharedApp, tenantApps]) {
    assert.equal(params(m).get('openAiTokenScope').text, 'openAiTokenScope');
    assert.equal(params(m).get('redisTokenScope').text, 'redisTokenScope');
  }
  assert.equal(JSON.parse(configTemplate).pools[0].endpoints[0].entra.scope, '__OPENAI_TOKEN_SCOPE__');
  assert.match(af.vars.get('sharedStore').text, /scope: redisTokenScope/);
});

// The managed OpenTelemetry agent: one parameter, otelDestination
// (GATEWAY_OTEL_DESTINATION), decides it; empty changes nothing.
test('OpenTelemetry: the agent\'s configuration for each destination, and nothing when the parameter is empty', () => {
  const isOtel = userFunction(main, 'isOtelDestination');
  for (const [d, ok] of [['', true], ['appinsights', true], ['https://otlp.example.com:4317', true], ['http://collector.internal:4317', true],
    ['AppInsights', false], ['otlp.example.com:4317', false], ['https://', false], ['datadog', false]]) {
    assert.equal(isOtel(d), ok, `isOtelDestination(${JSON.stringify(d)})`);
  }
  assert.equal(main.value(main.params.get('otelDestination')), '');
  assert.equal(main.value(main.params.get('otelHeaders')), '');
  assert.match(main.tree.rootNode.text, /@secure\(\)\n@description\([^\n]*\)\nparam otelHeaders string/, 'the headers (a key) are secure');
  const checkDest = (otelDestination, otelHeaders) => evaluate(main.vars.get('checkedOtelDestination'), { otelDestination, otelHeaders, isOtelDestination: isOtel });
  assert.equal(checkDest('https://otlp.example.com:4317', 'api-key=k'), 'https://otlp.example.com:4317');
  assert.equal(checkDest('http://collector:4317', ''), 'http://collector:4317');
  assert.equal(checkDest('appinsights', ''), 'appinsights');
  assert.equal(checkDest('', ''), '');
  assert.throws(() => checkDest('otlp.example.com:4317', 'api-key=k'), (e) => e instanceof DeploymentFailed && /GATEWAY_OTEL_DESTINATION.*scheme is required/.test(e.message));
  // The agent refuses an https endpoint without headers: refused up front.
  assert.throws(() => checkDest('https://otlp.example.com:4317', ' '), (e) => e instanceof DeploymentFailed && /GATEWAY_OTEL_HEADERS/.test(e.message));
  assert.equal(at(main.module('gateway').body, 'params.otelDestination').text, 'checkedOtelDestination');
  assert.equal(paramEnv.get('otelDestination'), 'GATEWAY_OTEL_DESTINATION');
  assert.equal(paramEnv.get('otelHeaders'), 'GATEWAY_OTEL_HEADERS');

  // The environment: both properties null (left out) when off.
  const envRes = gw.resource('Microsoft.App/managedEnvironments');
  const apiVersion = envRes.type.split('@')[1];
  assert.match(apiVersion, /^\d{4}-\d{2}-\d{2}-preview$/, 'openTelemetryConfiguration is in the preview API versions');
  assert.ok(apiVersion >= '2024-08-02', `API version ${apiVersion} predates the agent's OTLP headers as documented`);
  const envProps = prop(envRes.body, 'properties');
  assert.equal(prop(envProps, 'openTelemetryConfiguration').text, 'otelOn ? otelAgent(otelDestination, otelHeaders) : null');
  assert.equal(prop(envProps, 'appInsightsConfiguration').text, 'otelAppInsights ? { connectionString: appInsights.properties.ConnectionString } : null');
  assert.equal(gw.vars.get('otelOn').text, '!empty(otelDestination)');
  assert.equal(gw.vars.get('otelAppInsights').text, "otelDestination == 'appinsights'");
  const ai = gw.resource('Microsoft.Insights/components');
  assert.match(gw.tree.rootNode.text, /resource appInsights '[^']+' = if \(otelAppInsights\)/, 'Application Insights only for its destination');
  assert.equal(at(ai.body, 'properties.WorkspaceResourceId').text, `${gw.resource('Microsoft.OperationalInsights/workspaces').name}.id`);
  // What ARM would deploy for each destination.
  const agent = userFunction(gw, 'otelAgent');
  assert.deepEqual(agent('appinsights', ''), { tracesConfiguration: { destinations: ['appInsights'] } }, 'Application Insights takes traces, no metrics');
  const otlp = agent('https://otlp.example.com:4317', 'api-key=s3cret, x-tenant = a=b,junk');
  assert.deepEqual(otlp, {
    destinationsConfiguration: { otlpConfigurations: [{ name: 'otlp', endpoint: 'https://otlp.example.com:4317', insecure: false, headers: [{ key: 'api-key', value: 's3cret' }, { key: 'x-tenant', value: 'a=b' }] }] },
    tracesConfiguration: { destinations: ['otlp'] },
    metricsConfiguration: { destinations: ['otlp'] },
  });
  assert.equal(agent('http://collector:4317', '').destinationsConfiguration.otlpConfigurations[0].insecure, true);
  assert.deepEqual(agent('http://collector:4317', '').destinationsConfiguration.otlpConfigurations[0].headers, []);
  // Every destination an OTLP configuration names is one it declares.
  for (const cfg of [otlp, agent('appinsights', '')]) {
    const names = new Set([...(cfg.destinationsConfiguration?.otlpConfigurations ?? []).map((o) => o.name), 'appInsights']);
    for (const k of ['tracesConfiguration', 'metricsConfiguration', 'logsConfiguration']) {
      for (const d of cfg[k]?.destinations ?? []) assert.ok(names.has(d), `${k} sends to undeclared ${d}`);
    }
  }

  // The apps: the platform injects the endpoint and protocol (grpc), which
  // the gateway reads; the app names itself, records one trace in ten (the
  // gateway's own default records every trace) and, for Application
  // Insights, exports no metrics. Nothing when off.
  for (const m of [sharedApp, tenantApps]) assert.equal(params(m).get('otelDestination').text, 'otelDestination', `${m.name} gets the destination`);
  assert.match(prop(container, 'env').text, /, otelEnv\)$/);
  const otelEnv = af.vars.get('otelEnv').text;
  assert.match(otelEnv, /^empty\(otelDestination\)\s*\? \[\]/);
  assert.match(otelEnv, /name: 'OTEL_SERVICE_NAME', value: appName/);
  assert.match(otelEnv, /name: 'OTEL_TRACES_SAMPLER', value: 'parentbased_traceidratio'/);
  assert.match(otelEnv, /name: 'OTEL_TRACES_SAMPLER_ARG', value: '0\.1'/);
  assert.match(otelEnv, /otelDestination == 'appinsights' \? \[\{ name: 'OTEL_METRICS_EXPORTER', value: 'none' \}\]/);
  assert.doesNotMatch(otelEnv, /OTEL_EXPORTER_OTLP_(ENDPOINT|PROTOCOL)/, 'the platform sets these: a value here would override the agent\'s');
  const configGo = fs.readFileSync(path.join(root, 'shared/telemetry/otlp/config.go'), 'utf8');
  assert.match(configGo, /p != "http\/protobuf" && p != "grpc"/, 'the gateway takes OTEL_EXPORTER_OTLP_PROTOCOL=grpc, which the agent injects');
  for (const v of ['GATEWAY_OTEL_DESTINATION', 'GATEWAY_OTEL_HEADERS']) assert.match(azureSection, new RegExp(v));
});

// A bad GATEWAY_TENANTS row or an isolated tenant whose
// model has no deployment fails up front with the field named (fail() in
// main.bicep, before the gateway module), not with an ARM expression error
// after identities and Redis access exist; requests and interval default.
test('tenant rows: defaults for requests and interval, fail() up front for what has none', () => {
  const rows = (tenantTable) => evaluate(gw.vars.get('tenantRows'), { tenantTable });
  assert.deepEqual(rows([{ id: 'd1', models: ['gpt-4o-mini'] }]), [{ id: 'd1', name: '', models: ['gpt-4o-mini'], requests: 600, interval: '1m' }]);
  assert.deepEqual(rows([{ id: 'd1', name: 'contoso', models: ['m'], requests: 5, interval: '1h' }]), [{ id: 'd1', name: 'contoso', models: ['m'], requests: 5, interval: '1h' }]);
  // The defaults are the isolated tier's, declared once in each place.
  assert.match(gw.vars.get('isolated').text, /requests: 600, interval: '1m'/);
  assert.match(gw.vars.get('tenantTable').text, /requests: 600, interval: '1m'/);

  const problem = userFunction(main, 'tenantRowProblem');
  for (const [row, want] of [[{ id: 'd1', models: ['m'] }, ''], [{ models: ['m'] }, 'id'], [{ id: 'd1' }, 'models'], [{ id: 'd1', name: 'n', models: [], requests: 1, interval: '1s' }, '']]) {
    assert.equal(problem(row), want, JSON.stringify(row));
  }
  const checkRows = (tenants) => evaluate(main.vars.get('checkedTenantRows'), { tenants, tenantRowProblem: problem, string: (x) => JSON.stringify(x) });
  assert.deepEqual(checkRows([{ id: 'd1', models: ['m'] }]), [{ id: 'd1', models: ['m'] }]);
  assert.throws(() => checkRows([{ id: 'd1', models: ['m'] }, { name: 'x', models: ['m'] }]), (e) => e instanceof DeploymentFailed && /GATEWAY_TENANTS.*no id/.test(e.message));
  assert.throws(() => checkRows([{ id: 'd1' }]), (e) => e instanceof DeploymentFailed && /no models/.test(e.message));
  assert.equal(at(main.module('gateway').body, 'params.tenants').text, 'checkedTenantRows', 'the gateway module gets the checked rows only');

  const missing = userFunction(main, 'missingDeployments');
  const models = { 'gpt-4o-mini': 'mini', 'gpt-4o': '4o' };
  assert.deepEqual(missing({ name: 'a', models: ['gpt-4o'] }, models), []);
  assert.deepEqual(missing({ name: 'a', models: ['gpt-4o', 'o3'] }, models), ['o3']);
  assert.deepEqual(missing({ name: 'a', models: ['gpt-4o'], deployments: { 'gpt-4o-mini': 'x' } }, models), ['gpt-4o'], 'its own deployments replace the default');
  const checkTenants = (isolatedTenants) => evaluate(main.vars.get('checkedTenants'), {
    isolatedTenants, models, tenantNames: isolatedTenants.map((t) => t.name),
    isTenantName: userFunction(main, 'isTenantName'), missingDeployments: missing,
  });
  const ok = [{ id: 'd2', name: 'fabrikam', models: ['gpt-4o'] }];
  assert.deepEqual(checkTenants(ok), ok);
  assert.throws(() => checkTenants([{ id: 'd2', name: 'fabrikam', models: ['gpt-4o', 'o3'] }]), (e) => e instanceof DeploymentFailed && /"fabrikam" calls o3/.test(e.message));
  assert.throws(() => checkTenants([{ id: 'd2', name: 'Fabrikam', models: ['gpt-4o'] }]), (e) => e instanceof DeploymentFailed && /not a tenant name/.test(e.message));
  assert.throws(() => checkTenants([...ok, ...ok]), (e) => e instanceof DeploymentFailed && /unique/.test(e.message));
  // Without the check, the same tenant fails where app.bicep looks its
  // model up: an ARM expression error in the middle of the deployment.
  const poolModels = af.vars.get('poolModels').text;
  assert.match(poolModels, /m => models\[m\]/, 'app.bicep indexes its models by the tenant\'s model names');
});

// The config is a Container Apps secret, and a changed
// secret makes no revision; the digest of every secret in the container's
// env (the revision template) does, for exactly the apps whose secrets
// changed. scripts/azconfig's TestConfigChangeRollsOnlyItsApp computes
// each app's digest input and checks which apps change.
test('every app\'s revision template carries a digest of its secrets, so a config change rolls a revision', () => {
  const hash = env.get('GATEWAY_CONFIG_HASH');
  assert.ok(hash, 'the container env sets GATEWAY_CONFIG_HASH');
  assert.equal(hash.text, 'configHash');
  assert.equal(af.vars.get('configHash').text, 'uniqueString(string(secrets))');
  assert.equal(at(appProps, 'configuration.secrets').text, 'secrets', 'the digest covers the secrets the app is given, all of them');
  assert.equal(af.vars.get('secrets').text, 'concat([configSecret], redisSecrets, vaultSecrets)');
  // Template, not configuration: a template change is what makes a revision.
  assert.ok(at(appProps, 'template.containers').text.includes('configHash'));
  assert.ok(!prop(appProps, 'configuration').text.includes('configHash'));
  assert.equal(at(appProps, 'configuration.activeRevisionsMode').text, "'Single'", 'the new revision replaces the old one');
  // The gateway reads no such variable: it is there for the platform only.
  assert.doesNotMatch(runGo, /GATEWAY_CONFIG_HASH/);
});

// The Key Vault grant is made as soon as the shared
// identity exists and before any app module, as the pull grant is, never
// in the same module just before the app that resolves the reference.
test('Key Vault Secrets User is granted before any app, by gateway.bicep', () => {
  assert.equal(af.modules.filter((m) => m.file === 'keyvault-access.bicep').length, 0, 'app.bicep grants no Key Vault role');
  assert.ok(!af.params.has('keyVaultName'), 'app.bicep takes no vault to grant on');
  const kv = gw.module('keyVaultAccess');
  assert.equal(kv.loop, null);
  assert.equal(at(kv.body, 'params.principalId').text, `${identity ? 'identity' : ''}.properties.principalId`);
  assert.equal(params(sharedApp).get('identityName').text, 'identity.name', 'the identity granted is the shared app\'s');
  assert.match(prop(sharedApp.body, 'dependsOn').text, /\bkeyVaultAccess\b/, 'the shared app waits for the grant');
  // The grant waits for nothing but the identity: no app, no Redis.
  assert.equal(prop(kv.body, 'dependsOn'), undefined);
  assert.doesNotMatch(kv.body.text, /app\b|tenantApps|redis/i);
  assert.ok(!params(tenantApps).has('keyVaultEnv') && !params(tenantApps).has('gatewayConfigKeyVaultSecretUri'), 'tenant apps read no vault');
});

// The agent's headers are read as the gateway reads
// OTEL_EXPORTER_OTLP_HEADERS (percent-decoded values), checked on the cases
// scripts/azconfig's TestOtlpHeadersParseAlike runs the gateway's parser on.
test('OTLP headers: the agent gets what the gateway would send, on the shared cases', () => {
  const { cases } = JSON.parse(fs.readFileSync(path.join(root, 'scripts/bicepcheck/testdata/otlp-headers.json'), 'utf8'));
  assert.ok(cases.length >= 8);
  const agent = userFunction(gw, 'otelAgent');
  for (const c of cases) {
    const got = agent('https://otlp.example.com:4317', c.in).destinationsConfiguration.otlpConfigurations[0].headers;
    assert.deepEqual(Object.fromEntries(got.map((h) => [h.key, h.value])), c.want, JSON.stringify(c.in));
    assert.equal(got.length, Object.keys(c.want).length, `${JSON.stringify(c.in)}: one entry per key`);
  }
  assert.match(gw.tree.rootNode.text, /headers: otlpHeaders\(headers\)/, 'the agent\'s configuration takes the parsed list');
});
