// The server under test, as run.sh started it (LG_URL, LG_MODEL,
// LG_ADMIN_KEY, and NODE_EXTRA_CA_CERTS naming its local CA, set before node
// started so that every HTTPS client in the process trusts it): raw requests
// and API keys made through the admin API.
import https from 'node:https';
import { readFileSync } from 'node:fs';

export function server() {
  const url = process.env.LG_URL;
  const ca = readFileSync(process.env.NODE_EXTRA_CA_CERTS);
  const s = {
    url,
    model: process.env.LG_MODEL,
    // A raw HTTPS request: {status, headers, body}.
    request(method, path, { headers = {}, body } = {}) {
      return new Promise((resolve, reject) => {
        const u = new URL(url + path);
        const req = https.request({ method, hostname: u.hostname, port: u.port, path: u.pathname + u.search, ca, headers },
          (res) => {
            let data = '';
            res.on('data', (c) => { data += c; });
            res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
          });
        req.on('error', reject);
        if (body !== undefined) req.write(typeof body === 'string' ? body : JSON.stringify(body));
        req.end();
      });
    },
    async createKey(team, name) {
      const r = await s.request('POST', '/admin/keys', {
        headers: { authorization: `Bearer ${process.env.LG_ADMIN_KEY}`, 'content-type': 'application/json' },
        body: { team, name },
      });
      if (r.status !== 200) throw new Error(`creating a key: ${r.status} ${r.body}`);
      return JSON.parse(r.body).key;
    },
  };
  return s;
}
