// The real OpenSandbox JS SDK (@alibaba-group/opensandbox, the version of
// package-lock.json) drives egressd's control API the way a Sandbox does:
// its default adapter factory's egress stack, with the endpoint header the
// server hands out. Policy: get, patch (merge), delete; Credential Vault:
// create, get, list and get credentials and bindings, patch with the
// revision guard, a stale revision refused, delete. Every step is asserted;
// one "ok"/"FAIL" line per step, exit 1 on any failure.
// Usage: node sequence.mjs BASE_URL TOKEN SECRET PHASE
//   PHASE setup: policy steps, then a vault with a bearer binding for
//   api.allowed.test /v1/* (left in place for the caller's request);
//   PHASE teardown: patch, stale patch, delete.
import { createDefaultAdapterFactory } from '@alibaba-group/opensandbox';
import assert from 'node:assert/strict';

const [base, token, secret, phase] = process.argv.slice(2);
const { egress, credentialVault } = createDefaultAdapterFactory().createEgressStack({
  connectionConfig: { headers: {} },
  egressBaseUrl: base,
  endpointHeaders: { 'OPENSANDBOX-EGRESS-AUTH': token },
});
let failed = 0;

async function step(name, fn) {
  try {
    await fn();
    console.log(`ok   - sdk: ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - sdk: ${name}: ${String(e && e.message).replaceAll(secret, '<secret>')}`);
  }
}

const targets = (p) => (p.egress || []).map((r) => `${r.action}:${r.target}`);

if (phase === 'setup') {
  await step('getPolicy returns the initial policy', async () => {
    const p = await egress.getPolicy();
    assert.equal(p.defaultAction, 'deny');
    assert.deepEqual(targets(p), ['allow:api.allowed.test']);
  });
  await step('patchRules merges (a new target added, an existing one replaced)', async () => {
    await egress.patchRules([
      { action: 'allow', target: 'extra.allowed.test' },
      { action: 'deny', target: 'api.allowed.test' },
    ]);
    const p = await egress.getPolicy();
    assert.equal(p.defaultAction, 'deny');
    assert.ok(targets(p).includes('allow:extra.allowed.test'));
    assert.ok(targets(p).includes('deny:api.allowed.test'));
  });
  await step('deleteRules removes by target (and ignores an absent one)', async () => {
    await egress.deleteRules(['extra.allowed.test', 'never.there.test']);
    const p = await egress.getPolicy();
    assert.ok(!targets(p).some((t) => t.endsWith(':extra.allowed.test')));
  });
  await step('patchRules restores the allow rule', async () => {
    await egress.patchRules([{ action: 'allow', target: 'api.allowed.test' }]);
    assert.deepEqual(targets(await egress.getPolicy()), ['allow:api.allowed.test']);
  });
  await step('credentialVault.create activates revision 1', async () => {
    const st = await credentialVault.create({
      credentials: [{ name: 'api-key', source: { type: 'inline', value: secret } }],
      bindings: [
        {
          name: 'api',
          match: { hosts: ['api.allowed.test'], methods: ['GET'], paths: ['/v1/*'] },
          auth: { type: 'bearer', credential: 'api-key' },
        },
      ],
    });
    assert.equal(st.revision, 1);
    assert.equal(st.credentials.length, 1);
    assert.equal(st.bindings.length, 1);
    assert.ok(!JSON.stringify(st).includes(secret));
  });
  await step('get, listCredentials, getCredential: metadata only', async () => {
    const st = await credentialVault.get();
    assert.equal(st.revision, 1);
    const creds = await credentialVault.listCredentials();
    assert.deepEqual(creds.map((c) => c.name), ['api-key']);
    const c = await credentialVault.getCredential('api-key');
    assert.equal(c.sourceType, 'inline');
    assert.ok(!JSON.stringify([st, creds, c]).includes(secret));
  });
  await step('listBindings, getBinding: sanitized auth', async () => {
    const bs = await credentialVault.listBindings();
    assert.deepEqual(bs.map((b) => b.name), ['api']);
    const b = await credentialVault.getBinding('api');
    assert.equal(b.auth.type, 'bearer');
    assert.deepEqual(b.match.hosts, ['api.allowed.test']);
    assert.ok(!('credential' in b.auth));
  });
  await step('getCredential of an unknown name is an error', async () => {
    await assert.rejects(credentialVault.getCredential('nope'));
  });
} else if (phase === 'teardown') {
  await step('patch with the revision guard replaces the binding', async () => {
    const st = await credentialVault.patch({
      expectedRevision: 1,
      bindings: {
        replace: [
          {
            name: 'api',
            match: { hosts: ['api.allowed.test'], methods: ['GET'], paths: ['/v2/*'] },
            auth: { type: 'bearer', credential: 'api-key' },
          },
        ],
      },
    });
    assert.equal(st.revision, 2);
    assert.deepEqual((await credentialVault.getBinding('api')).match.paths, ['/v2/*']);
  });
  await step('a stale revision is refused and changes nothing', async () => {
    await assert.rejects(
      credentialVault.patch({ expectedRevision: 1, bindings: { delete: ['api'] } }),
    );
    assert.equal((await credentialVault.get()).revision, 2);
  });
  await step('delete removes the vault', async () => {
    await credentialVault.delete();
    await assert.rejects(credentialVault.get());
  });
} else {
  console.log(`FAIL - sdk: unknown phase ${phase}`);
  failed++;
}
process.exit(failed === 0 ? 0 : 1);
