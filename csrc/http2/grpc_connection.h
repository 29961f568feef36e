// One gRPC-over-HTTP/2 server connection (RFC 9113, gRPC's PROTOCOL-HTTP2.md), with no
// sockets: receive() consumes the bytes read from the peer and reports events (a call
// opened on stream N with its path and metadata, one whole gRPC message, the client's
// half-close, a cancelled stream); send_message() / finish() queue a response; and
// take_output() hands back the bytes to write. Everything the peer could get wrong is
// answered here with the code RFC 9113 gives it, so that the socket owner only moves
// bytes and the protocol can be unit-tested and fuzzed as a pure function.
//
// What it enforces:
// - the connection preface, a SETTINGS frame first, frame sizes, stream id order, the
//   stream state machine (§5.1), HEADERS + CONTINUATION with nothing interleaved;
// - flow control both ways (§5.2, §6.9): DATA beyond the window we granted is a
//   FLOW_CONTROL_ERROR; our DATA waits for the peer's window, so a large response
//   goes out as the client reads it, and a client that never opens the window never
//   gets more than it granted (the rest stays queued on its stream); a stream whose
//   queued answers pass `max_stream_backlog` gets no more receive window until they
//   drain, so a streaming client that does not read cannot make us buffer more;
// - SETTINGS_MAX_CONCURRENT_STREAMS (a stream beyond it is refused with
//   REFUSED_STREAM), a header list limit (431 then RST_STREAM), HPACK's table limit,
//   a bound on CONTINUATION frames and on a header block's bytes (ENHANCE_YOUR_CALM),
//   a bound on streams the client resets before their answer (rapid reset,
//   ENHANCE_YOUR_CALM), and a gRPC message size limit (RESOURCE_EXHAUSTED);
// - gRPC framing: the 5-byte message prefix, grpc-encoding (identity, gzip, deflate:
//   a compressed message is reported as such and inflated by the caller),
//   grpc-timeout (parsed; the caller keeps the clock), trailers with grpc-status and a
//   percent-encoded grpc-message, trailers-only responses.
//
// Threads and locks: a GrpcConnection belongs to one socket and is only ever called by
// the thread that runs that socket's event loop; it has no locks and shares nothing.
// Calls never throw on peer input; protocol errors end in a GOAWAY in the output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "http1/http_scan.h"
#include "http2/hpack.h"
#include "ipc/block_views.h"

namespace naiad::h2 {

// RFC 9113 §7.
enum ErrorCode : uint32_t {
  kNoError = 0x0,
  kProtocolError = 0x1,
  kInternalError = 0x2,
  kFlowControlError = 0x3,
  kSettingsTimeout = 0x4,
  kStreamClosed = 0x5,
  kFrameSizeError = 0x6,
  kRefusedStream = 0x7,
  kCancel = 0x8,
  kCompressionError = 0x9,
  kConnectError = 0xa,
  kEnhanceYourCalm = 0xb,
};

struct Limits {
  uint32_t max_concurrent_streams = 128;    // advertised and enforced
  uint32_t max_header_list_size = 16384;    // advertised; RFC 7541 §4.1 accounting
  uint32_t header_table_size = 4096;        // advertised HPACK dynamic table bound
  uint32_t max_continuation_frames = 16;    // per header block
  uint32_t max_header_block_bytes = 65536;  // encoded bytes per header block
  uint32_t stream_window = 4u << 20;        // receive window per stream we grant
  uint32_t connection_window = 16u << 20;   // receive window of the connection
  uint64_t max_message_size = 0x7fffffff;   // bytes of one gRPC message (2 GiB - 1)
  uint32_t max_client_resets = 100;         // resets before answers, net of answers
  // Answers queued on one stream (waiting for the client's window) beyond which we stop
  // opening that stream's receive window: a client that sends requests on a stream but
  // does not read the answers is held back by flow control, not buffered for.
  uint64_t max_stream_backlog = 16u << 20;
  // --grpc-infer-response-compression-level: 0 none, 1 low, 2 medium, 3 high. Not a
  // limit but the connection's one answer setting: with a level, messages are compressed
  // with the algorithm gRPC core picks for it among those the call's
  // grpc-accept-encoding names (response_encoding_for).
  int response_compression = 0;
};

// gRPC core's choice of a response algorithm for a compression level (Triton sets the
// level on its server builder): the algorithms the client accepts, ranked gzip then
// deflate, and the first (low), middle (medium) or last (high) of them; identity at
// level 0 or when the client accepts neither. `accept`: grpc-accept-encoding's value.
ResponseEncoding response_encoding_for(int level, std::string_view accept);

enum class EventKind : uint8_t {
  kCall,       // a new call: stream_id, path, metadata, timeout_us
  kMessage,    // one whole gRPC message: stream_id, message, compressed
  kHalfClose,  // the client sent its last message on stream_id
  kCancel,     // stream_id is gone (client RST_STREAM, or a stream error we answered)
};

struct Event {
  EventKind kind = EventKind::kCall;
  uint32_t stream_id = 0;
  std::string path;
  std::vector<hpack::Header> metadata;  // regular (non-pseudo) headers, as received
  int64_t timeout_us = -1;              // grpc-timeout; -1: none
  std::string encoding;                 // grpc-encoding of the call ("" = identity)
  std::string message;                  // payload without the 5-byte prefix
  bool compressed = false;              // the prefix's compressed flag
  uint32_t error_code = 0;              // kCancel: the RST_STREAM code
};

class GrpcConnection {
 public:
  explicit GrpcConnection(const Limits& limits = Limits());

  // Consumes `size` received bytes; appends what happened to `events`. After a
  // connection error the rest of the input is ignored (closed() is true).
  void receive(const char* data, size_t size, std::vector<Event>* events);

  // Queues one gRPC message on a call (response headers go first, once). False when
  // the stream is gone (cancelled, reset, or the connection closed): drop the answer.
  bool send_message(uint32_t stream_id, std::string_view payload);
  // The same, for a message given as pieces to send one after the other (e.g. a
  // response's own bytes and its tensors in the result block, grpc_infer_message.h's
  // infer_response_parts): the pieces are copied once, straight into the frames, or
  // into the stream's queue for what the flow-control windows do not allow yet.
  // With `block`: pieces of a page or more that lie in it (the tensors) go into the
  // frames the windows allow now as views of it, not copied (block_views.h); take the
  // output with take_output(out, views) then.
  bool send_message(uint32_t stream_id, const std::string_view* parts, size_t n_parts,
                    const std::shared_ptr<HeldBlock>& block = nullptr);
  // Ends a call with grpc-status / grpc-message trailers, after its queued messages.
  bool finish(uint32_t stream_id, int status, std::string_view message);
  // Cancels a call from our side (RST_STREAM with `code`), e.g. at its deadline.
  void reset(uint32_t stream_id, uint32_t code);
  // Graceful shutdown: GOAWAY(NO_ERROR) naming the last stream we accepted; calls
  // already open are still answered, new ones are ignored. done() once all are.
  void shutdown();
  // A keepalive PING of ours (--grpc-keepalive-time); pings_unacked() counts it until
  // the peer's ACK comes back.
  void ping();
  uint32_t pings_unacked() const { return pings_unacked_; }
  // PINGs the client sent (each answered with an ACK): the front end's ping policy
  // (--grpc-http2-max-ping-strikes) counts them; too_many_pings() is its verdict, as
  // gRPC core's: GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings") and the connection closes.
  uint64_t pings_received() const { return pings_received_; }
  void too_many_pings() { connection_error(kEnhanceYourCalm, "too_many_pings"); }

  // Bytes to write to the peer, in order (moved out).
  std::string take_output();
  // The same, swapped into `out` (whatever `out` held is dropped).
  void take_output(std::string* out) {
    out->clear();
    out->swap(output_);
  }
  // The output appended to `out` (moved when `out` is empty), its views (send_message
  // with a block) to `views`, which splice into `out`.
  void take_output(std::string* out, OutViews* views) {
    views->append(std::move(output_views_), out->size());
    if (out->empty()) {
      out->swap(output_);
    } else {
      out->append(output_);
      output_.clear();
    }
  }
  bool has_output() const { return !output_.empty(); }
  size_t output_size() const { return output_.size(); }

  // A connection error was sent (GOAWAY): write the output, then close the socket.
  bool closed() const { return closed_; }
  // After shutdown(): every call answered; close once the output is written.
  bool done() const { return going_away_ && streams_.empty(); }
  size_t open_streams() const { return streams_.size(); }
  // Bytes queued on streams waiting for the peer's flow-control window.
  size_t queued_bytes() const { return queued_bytes_; }
  // Bytes of gRPC messages copied inside the connection (the copy count a test checks):
  // in, a frame carried to the next receive() and a message put together from its DATA
  // frames; out, a message into the frames or into a stream's queue, and from that
  // queue into frames.
  uint64_t copied_in() const { return copied_in_; }
  uint64_t copied_out() const { return copied_out_; }
  // Bytes of messages that went into frames as views of their block, not copied.
  uint64_t viewed_out() const { return viewed_out_; }
  // Why the connection was closed ("" when it was not).
  const std::string& error() const { return error_; }

 private:
  struct Stream {
    bool announced = false;      // the caller saw its kCall
    bool remote_closed = false;  // END_STREAM received
    bool headers_sent = false;   // response headers written
    bool finishing = false;      // trailers queued behind `outbound`
    bool discard = false;        // answered early: inbound DATA is only counted
    int64_t send_window = 0;     // peer's window for our DATA
    uint32_t recv_unacked = 0;   // DATA bytes taken since our last WINDOW_UPDATE
    std::string encoding;        // grpc-encoding
    ResponseEncoding response_encoding = ResponseEncoding::kIdentity;  // of our messages
    std::string inbound;   // bytes of a gRPC message not complete yet
    std::string outbound;  // framed gRPC messages waiting for window
    size_t outbound_pos = 0;
    int status = 0;  // trailers, once finishing
    std::string status_message;
  };

  // The grpc-encoding header of a stream whose messages we compress (none for identity),
  // in every block of response headers but a trailers-only one.
  static void encode_response_encoding(const Stream& s, std::string* block);

  // Frame input.
  void on_frame(uint8_t type, uint8_t flags, uint32_t stream_id, std::string_view payload,
                std::vector<Event>* events);
  void on_data(uint8_t flags, uint32_t stream_id, std::string_view payload,
               std::vector<Event>* events);
  void on_headers(uint8_t flags, uint32_t stream_id, std::string_view payload,
                  std::vector<Event>* events);
  void on_header_block(std::vector<Event>* events);
  void on_settings(uint8_t flags, std::string_view payload);
  void on_window_update(uint32_t stream_id, std::string_view payload);
  void on_rst_stream(uint32_t stream_id, std::string_view payload, std::vector<Event>* events);
  void open_call(uint32_t stream_id, bool end_stream, std::vector<hpack::Header>& headers,
                 std::vector<Event>* events);
  void take_messages(uint32_t stream_id, Stream& stream, std::vector<Event>* events);

  // Output.
  void write_frame_header(uint8_t type, uint8_t flags, uint32_t stream_id, size_t length);
  void write_frame(uint8_t type, uint8_t flags, uint32_t stream_id, std::string_view payload);
  void write_header_block(uint32_t stream_id, bool end_stream, const std::string& block);
  void write_settings();
  void write_window_update(uint32_t stream_id, uint32_t increment);
  void write_rst(uint32_t stream_id, uint32_t code);
  void pump();  // sends queued DATA and trailers as windows allow
  bool pump_stream(uint32_t stream_id, Stream& stream);  // true: stream ended
  void answer_http(uint32_t stream_id, int http_status);
  void answer_early(uint32_t stream_id, Stream& stream, int status, std::string_view message,
                    std::vector<Event>* events);
  void close_stream(uint32_t stream_id, std::vector<Event>* events, uint32_t code);
  void connection_error(uint32_t code, std::string message);
  void replenish(uint32_t stream_id, Stream* stream, size_t bytes);
  void reopen_window(uint32_t stream_id, Stream& stream);

  Limits limits_;
  hpack::Decoder decoder_;
  std::string input_;   // an incomplete frame carried to the next receive()
  std::string output_;  // bytes for the peer
  bool preface_done_ = false;
  bool settings_seen_ = false;
  bool closed_ = false;
  bool going_away_ = false;
  uint32_t pings_unacked_ = 0;   // our PINGs without an ACK yet
  uint64_t pings_received_ = 0;  // the client's PINGs
  std::string error_;

  // Peer settings (§6.5.2) that shape what we send.
  uint32_t peer_max_frame_size_ = 16384;
  int64_t peer_initial_window_ = 65535;
  int64_t conn_send_window_ = 65535;
  // Our receive side: what the peer may still send on the connection.
  int64_t conn_recv_available_ = 65535;
  uint64_t conn_recv_unacked_ = 0;

  // A header block being collected (HEADERS without END_HEADERS, then CONTINUATION).
  uint32_t block_stream_ = 0;
  bool block_end_stream_ = false;
  uint32_t block_frames_ = 0;
  std::string block_;

  uint32_t last_client_stream_ = 0;  // highest stream id the client opened
  uint32_t goaway_last_stream_ = 0x7fffffff;
  int64_t resets_net_ = 0;  // client resets of unanswered calls minus calls answered
  size_t queued_bytes_ = 0;
  uint64_t copied_in_ = 0;
  uint64_t copied_out_ = 0;
  uint64_t viewed_out_ = 0;
  OutViews output_views_;               // views spliced into output_
  std::map<uint32_t, Stream> streams_;  // open streams, by id (ordered: fair pumping)
};

}  // namespace naiad::h2
