// Exchange: one request and its response, as a handler sees it; and Handler,
// what the server calls for every complete request.
//
// A handler is called on the connection's I/O thread and must not block: it
// either answers at once (respond()) or hands the exchange to other work (the
// scheduler's engine thread) that answers later, as one complete response or
// as a stream of chunks (server-sent events). Exactly one response per
// exchange: respond(), or startStream() then send()... then end().
//
// States: waiting for a response -> responding (respond) or streaming
// (startStream) -> complete (the response's last byte was written; the
// connection goes on with the next request) or disconnected (the connection
// went away first, for a DisconnectCause: the client closed it, a timeout
// cut it, or the server stopped). Calls after the exchange completed or disconnected are ignored,
// so a producer that races a disconnect needs no lock of its own; calls out of
// order (send() before startStream(), a second respond()) are bugs: they are
// logged and the connection is closed rather than sending a malformed
// response.
//
// Thread-safety: every method may be called from any thread. Calls made on
// the connection's own I/O thread (inside the handler, or inside an
// onDisconnect callback) take effect at once; calls from other threads are
// posted to the connection's strand in the order each thread makes them. So a
// handler may hand the exchange to a producer thread and only then call
// startStream(): the start still reaches the connection before anything the
// producer sends.
// Ownership: a shared_ptr; the handler and the producer may keep it as long
// as they like; it keeps the connection's resources only until the exchange
// completes or disconnects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/http/http_message.h"

namespace lg::proxy {

// Why an exchange disconnected before its response was complete. Billing
// tells the client's doing (cancelled, billed for what was computed) from
// the server's (failed, not billed): clientCaused().
enum class DisconnectCause : uint8_t {
  kClientClosed,    // the client closed or reset the connection
  kSlowReader,      // the client read a stream so slowly that its queue passed the server's limit
  kWriteTimeout,    // a write made no progress within the write timeout: the client stopped reading
  kRequestTimeout,  // the server's own limit: no complete response within the request timeout
  kShutdown,        // the server stopped
  kServerError,     // the server misused the exchange (a bug), and closed the connection
};
std::string_view disconnectCauseName(DisconnectCause cause);  // "client_closed", ...
// The causes the client controls.
inline bool clientCaused(DisconnectCause cause) {
  return cause == DisconnectCause::kClientClosed || cause == DisconnectCause::kSlowReader ||
         cause == DisconnectCause::kWriteTimeout;
}

class Exchange {
 public:
  virtual ~Exchange() = default;

  // The request; valid as long as the exchange is.
  virtual const HttpRequest& request() const = 0;

  // A complete response. The server adds content-length, x-request-id, date
  // and, when the connection ends after it, connection: close.
  virtual void respond(int status, HttpHeaders headers, std::string body) = 0;

  // Starts a streamed response: chunked transfer encoding on HTTP/1.1 (for
  // SSE set content-type: text/event-stream), the connection closed at the
  // end on HTTP/1.0. From here on the request timeout no longer applies; each
  // write must still make progress within the write timeout.
  virtual void startStream(int status, HttpHeaders headers) = 0;
  // One piece of the streamed body (empty pieces are skipped). Pieces queue
  // while the client is slow; a queue beyond the server's limit closes the
  // connection (a disconnect) rather than buffering without bound.
  virtual void send(std::string data) = 0;
  // Finishes the stream; the connection then serves its next request.
  virtual void end() = 0;

  // `callback` runs once, on the connection's I/O thread, if the exchange
  // disconnects before its response was completely written (possibly inside
  // an Exchange call made on that thread); at once, on the calling thread, if
  // it already has. It is told why. It must not block (cancel the generation
  // and return). A second call replaces the first callback.
  virtual void onDisconnect(std::function<void(DisconnectCause)> callback) = 0;
  // True once the exchange disconnected (from any thread).
  virtual bool disconnected() const = 0;
};

// Called on an I/O thread for every complete request; must not block. The
// request is exchange->request(), passed again for convenience.
using Handler = std::function<void(const HttpRequest& request, std::shared_ptr<Exchange> exchange)>;

}  // namespace lg::proxy
