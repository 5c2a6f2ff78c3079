'use strict';
// Starts the real layerserve binary (env LAYERSERVE_SERVER) on 127.0.0.1 with ports
// the OS picks, and reads the gRPC address from the line it prints, as
// tests/testing/server_process.py does; and rejection(), which the tests share.
const assert = require('node:assert/strict');
const {spawn} = require('node:child_process');
const readline = require('node:readline');

const GRPC_LINE = /gRPC listening on (\S+)/;

async function startServer(extraArgs = [], timeoutMs = 30000) {
  const binary = process.env.LAYERSERVE_SERVER;
  if (!binary) throw new Error('LAYERSERVE_SERVER is not set (the layerserve binary)');
  const proc = spawn(binary, ['--host=127.0.0.1', '--port=0', '--metrics-port=0', ...extraArgs],
                     {stdio: ['ignore', 'pipe', 'pipe']});
  const lines = [];
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal)));
  const target = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`layerserve did not start:\n${lines.join('\n')}`)),
                             timeoutMs);
    for (const stream of [proc.stdout, proc.stderr]) {
      readline.createInterface({input: stream}).on('line', (line) => {
        lines.push(line);
        const match = GRPC_LINE.exec(line);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]);
        }
      });
    }
    exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`layerserve exited (${code}) before listening:\n${lines.join('\n')}`));
    });
  });
  return {
    target,
    output: () => lines.join('\n'),
    // SIGTERM (drain), then the exit code: 0 for a clean shutdown.
    stop: () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
}

// Awaits a call that must fail; returns the error.
async function rejection(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail('the call succeeded');
}

module.exports = {startServer, rejection};
