// The Node.js baseline of `deepchat system status --json` (bench `control`): discovers the host through
// $AWP_HOST_DATA_DIR/local-control/local-control.json, sends one `cli.status` envelope to POST /v1/rpc over the
// Unix socket with the descriptor's token (what DeepChat's CLI transport does), prints the JSON answer.
// Exits 1 on any failure so that the bench never times a failed request.
'use strict';
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const dataDir = process.env.AWP_HOST_DATA_DIR;
const descriptor = JSON.parse(
  fs.readFileSync(path.join(dataDir, 'local-control', 'local-control.json'), 'utf8'),
);
const body = JSON.stringify({
  protocolVersion: descriptor.protocolVersion,
  surfaceVersion: descriptor.surfaceVersion,
  id: 'node-status-1',
  method: 'cli.status',
  params: {},
});
const request = http.request(
  {
    socketPath: descriptor.endpoint.path,
    path: '/v1/rpc',
    method: 'POST',
    headers: {
      Host: 'localhost',
      Authorization: `Bearer ${descriptor.token}`,
      Connection: 'close',
      'Content-Type': 'application/json',
      'Content-Length': Buffer.byteLength(body),
      'x-deepchat-method': 'cli.status',
    },
  },
  (response) => {
    const chunks = [];
    response.on('data', (chunk) => chunks.push(chunk));
    response.on('end', () => {
      const envelope = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (response.statusCode !== 200 || envelope.ok !== true) {
        process.stderr.write(`status failed: ${response.statusCode}\n`);
        process.exit(1);
      }
      process.stdout.write(`${JSON.stringify(envelope)}\n`);
    });
  },
);
request.on('error', (error) => {
  process.stderr.write(`request failed: ${error.message}\n`);
  process.exit(1);
});
request.end(body);
