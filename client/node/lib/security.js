'use strict';
// LayerClient's security options: a bearer token (given, or read from a file) and TLS
// from files (CA, client certificate and key), turned into channel credentials and an
// interceptor that adds "authorization: Bearer <token>" to each call.
//
// The token never appears in an Error this module throws: errors name the option and
// the file's path only.
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');

// A token is one line of visible ASCII: anything else (a second line, a space) could
// not travel as a header, and grpc-js's complaint about the header would quote it.
const TOKEN_SHAPE = /^[\x21-\x7e]+$/;

function readFile(option, path) {
  try {
    return fs.readFileSync(path);
  } catch (error) {
    // error.code (ENOENT, EACCES...) and the path; never the file's bytes.
    throw new Error(`LayerClient: ${option} ${path}: cannot read it (${error.code ?? error.message})`);
  }
}

// The token from options.token or options.tokenFile (read once, here; surrounding
// whitespace such as a trailing newline dropped), or null for none.
function resolveToken(options) {
  const {token, tokenFile} = options;
  if (token != null && tokenFile != null) {
    throw new Error('LayerClient: options token and tokenFile both given a token: give one');
  }
  if (token != null) {
    if (typeof token !== 'string' || !TOKEN_SHAPE.test(token)) {
      throw new Error('LayerClient: option token must be a non-empty string of visible ASCII ' +
                      'without spaces or line breaks');
    }
    return token;
  }
  if (tokenFile == null) return null;
  const read = readFile('tokenFile', tokenFile).toString('utf8').trim();
  if (read === '') throw new Error(`LayerClient: tokenFile ${tokenFile} is empty`);
  if (!TOKEN_SHAPE.test(read)) {
    throw new Error(`LayerClient: tokenFile ${tokenFile} must hold one token on one line ` +
                    '(visible ASCII, no spaces)');
  }
  return read;
}

// The channel credentials: options.credentials as given, TLS from tlsCa / tlsCert /
// tlsKey (a CA alone verifies the server; cert and key together also present a client
// certificate, for servers started with --tls-client-ca; without tlsCa the system's
// roots verify the server), or plaintext when none is given.
function resolveCredentials(options) {
  const {credentials, tlsCa, tlsCert, tlsKey} = options;
  const tlsFiles = tlsCa != null || tlsCert != null || tlsKey != null;
  if (credentials != null && tlsFiles) {
    throw new Error('LayerClient: options credentials and tlsCa/tlsCert/tlsKey both set the ' +
                    'channel\'s security: give one');
  }
  if ((tlsCert == null) !== (tlsKey == null)) {
    throw new Error('LayerClient: options tlsCert and tlsKey go together: ' +
                    `${tlsCert == null ? 'tlsKey' : 'tlsCert'} was given alone`);
  }
  if (credentials != null) return credentials;
  if (!tlsFiles) return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(
      tlsCa == null ? null : readFile('tlsCa', tlsCa),
      tlsKey == null ? null : readFile('tlsKey', tlsKey),
      tlsCert == null ? null : readFile('tlsCert', tlsCert));
}

// A grpc-js client interceptor adding the token to every call of the client it is
// given to. Metadata rather than call credentials: grpc-js refuses call credentials on
// a plaintext channel, and the server accepts a token there (it travels in clear).
function bearerInterceptor(token) {
  const value = `Bearer ${token}`;
  return (options, nextCall) => new grpc.InterceptingCall(nextCall(options), {
    start(metadata, listener, next) {
      metadata.set('authorization', value);
      next(metadata, listener);
    },
  });
}

module.exports = {resolveToken, resolveCredentials, bearerInterceptor};
