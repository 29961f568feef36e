// The C++ I/O loop of the HTTP front end: accepts the connections, reads them, hands
// the plain infer requests it finds to the lane (HttpLane::take_http), answers the
// completed batches of those requests from their response blocks and writes the
// answers, with no Python per request.
//
// Everything else stays Python's. Each connection is in one of two modes:
// - lane mode (the start): the bytes go to the lane. Its requests are owed in order;
//   the answers of one turn go out in one write per connection.
// - Python mode: the bytes go to the connection's Python protocol (http/protocol.py,
//   httptools and the general path) as Event::kData, and what it writes comes back
//   through write(). A connection enters it when the lane leaves bytes it does not take
//   (a GET, a head past 64 KiB, malformed input) and nothing is owed in lane mode
//   (else the bytes wait, unread further, until the owed answers are out: the order of
//   answers is the order of requests). It goes back to lane mode when Python says its
//   protocol owes nothing and holds nothing (take_back()).
// Nothing owed in one mode is ever owed in the other, so answers never overtake.
//
// Receiving in place: a plain request with binary tensors (Inference-Header-Content-
// Length, no Content-Encoding, plaintext, not an endpoint's) whose head and inference
// header have arrived but not all its tensors is validated and placed in the arena
// then (HttpLane::begin_http); the tensor bytes already read are copied to their
// places, and the rest are read from the socket straight there (readv), the bytes after
// its end into the read buffer as usual. Once all are in it is queued and owed as any
// request. One the lane refuses, or does not place, is collected whole in `in` and
// taken as before (a refusal is answered once its body is in). A client that goes away
// or times out mid-body gives its place back. The placed requests hold at most a
// quarter of the arena.
//
// A completion whose requests are all this loop's is answered here and its block freed;
// its statistics go to Python as one Answered per completion. Any other completion goes
// to Python as the core gave it (the general path's, a failed batch, gRPC's), and Python
// answers this loop's requests among them through answer() (owned() says what they are).
//
// Threads: each loop has one owning thread, which alone calls its methods and touches
// its connections: today the front end's event loop (the GIL released around run() and
// poll()), or an IoThread (io_thread.h) when a group (io_group.h) runs several loops;
// a thread holding that IoThread paused (IoThread::Pause) is the owner meanwhile.
// The owner calls run() when this loop's epoll fd is readable (sockets, and the mailbox)
// and poll() when the core's notify eventfd is (completions, for every protocol: gRPC's
// go to Python from here too). Other threads reach a loop only through its mailbox
// (post_connection, post_share, post_turn: `mail_`, under its mutex, with an eventfd in
// the epoll set to wake the owner). No other member needs a lock.
//
// A loop that relays to another (relay_to: loops 1..N-1 of `naiad serve`, relaying to
// loop 0 on Python's thread) hands Python nothing itself. A connection that needs
// Python (an HTTP request the lane leaves, a gRPC call it does not take, PINGs Python
// watches) collects its events for Python in the connection and moves whole, at the end
// of the turn, to the relay target, which announces it to Python (kAccepted or
// kGrpcAccepted under the target's id) with those events; it stays there for good. It
// moves once nothing is owed on it here: an HTTP connection goes to Python only then
// anyway; a gRPC connection takes no more lane calls, stops being read and waits for its
// lane calls in flight, and its calls held but not submitted go to Python with it. What
// its turns leave for Python (failed batches, statistics, TLS failures) is posted to the
// target, which hands it over with its own next turn. Completions with a request no
// loop sent it leaves in the core for the target to poll (take_completions), so that
// one thread takes them all and Python gets them in the order they were done.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/core.h"
#include "http1/deadline_timer.h"
#include "http1/endpoint_routes.h"
#include "http1/http_framer.h"
#include "http1/io_group.h"
#include "http2/grpc_connection.h"
#include "http2/grpc_inflate.h"
#include "http2/grpc_lane.h"
#include "ipc/block_views.h"
#include "tls/tls_stream.h"
#include "util/spare_nodes.h"

namespace naiad {

class HttpIo {
 public:
  // `listen_fd`: a listening TCP socket (non-blocking) for HTTP/1.1, kept open by the
  // caller until this loop is gone; -1: none (HTTP is served elsewhere, or not at all).
  HttpIo(HttpLane& lane, Core& core, int listen_fd);
  ~HttpIo();
  HttpIo(const HttpIo&) = delete;
  HttpIo& operator=(const HttpIo&) = delete;

  int epoll_fd() const { return epoll_fd_; }

  // -- several loops (io_group.h) --------------------------------------------------------
  // This loop is loop `index` of `group` (IoGroup::add calls it, before the loop
  // serves): the connections its listeners accept are handed out round robin over the
  // group, its connection ids are index + 1 plus multiples of the group's size (unique
  // in the group), and the completions it polls go to the loops that own their requests.
  void join(IoGroup* group, uint32_t index);
  uint32_t loop_index() const { return index_; }
  // This loop hands Python nothing itself: see "relays" above. Set before it serves.
  void relay_to(HttpIo* target) { relay_ = target; }
  // Tests: `hook` runs in every poll between Core::poll and the routing of what it
  // gave, the window in which another loop's thread may poll the core (empty: none).
  void set_after_core_poll(std::function<void()> hook) { after_core_poll_ = std::move(hook); }
  // Connections moved to the relay target since this loop started.
  uint64_t connections_moved() const { return moved_; }
  // Connections this loop served since it started (accepted here or handed to it).
  uint64_t connections_served() const { return served_; }

  // Whether the lane takes requests in lane mode (false while something per request
  // must run in Python: tracing, header rules); off, every connection's bytes go to
  // Python.
  void set_taking(bool taking) { taking_ = taking; }
  void set_max_body(size_t max_body) { max_body_ = max_body; }
  // How long a turn may poll for the arrivals a held batch waits for (0: never), see
  // spin_for_arrivals; kSpinNs by default.
  void set_spin(uint64_t ns) { spin_ns_ = ns; }
  static constexpr uint64_t kSpinNs = 50000;
  // Accepts HTTP/1.1 connections on `listen_fd` (a loop made with -1).
  void listen_http(int listen_fd);
  // TLS on the connections the HTTP (`grpc` false) or gRPC listener accepts from now on
  // (null: plaintext). Each connection is then a TlsStream over its socket: the bytes
  // read are decrypted before anything else sees them, and what is sent is encrypted
  // as it goes out (send_out). A plaintext listener closes a connection that opens
  // with a TLS handshake record.
  void set_tls(bool grpc, std::shared_ptr<const TlsContext> context);
  // Accepts HTTP/1.1 connections on `listen_fd` (kept open by the caller) for a
  // SageMaker or Vertex AI endpoint, without TLS as Triton's: their bytes go through an
  // EndpointStream (endpoint_routes.h), and are then served as the HTTP port's.
  // std::invalid_argument when a Vertex AI route is not a regular expression.
  void listen_endpoint(int listen_fd, const EndpointRoutes& routes);
  // Stop accepting HTTP/1.1 connections, the endpoints' too (shutdown); the connections
  // stay.
  void stop_listening();
  // Closes every connection, reporting none (shutdown of a relaying loop, whose
  // connections Python does not know).
  void close_all();

  // -- gRPC (HTTP/2): csrc/http2/grpc_io.cc -------------------------------------------
  // Accepts gRPC connections on `listen_fd` (kept open by the caller until this loop is
  // gone), each an h2::GrpcConnection with `limits`. ModelInfer calls that `lane` takes
  // are submitted, answered and written here; every other call (and every call while
  // not grpc taking) goes to Python as kGrpc events, which answers through grpc().
  // `listen_fd` -1: no listener here, but the gRPC connections another loop of the
  // group hands over are served with `lane` and `limits`.
  void listen_grpc(int listen_fd, GrpcLane& lane, const h2::Limits& limits);
  void stop_listening_grpc();
  // Whether the gRPC lane takes ModelInfer calls here (false while Python must see each
  // call: tracing, header forwarding).
  void set_grpc_taking(bool taking) { grpc_taking_ = taking; }
  // Keep the gRPC connections this loop's listener accepts here rather than hand them
  // out over the group (their keepalive and connection age are Python's, on loop 0).
  void set_keep_grpc(bool keep) { keep_grpc_ = keep; }
  // A restricted inference protocol (--grpc-restricted-protocol): the ModelInfer calls the
  // lane takes must carry metadata `key` with `value` exactly; one that does not is
  // answered UNAVAILABLE `denial` (Python's words, flags/restrictions.py). `key` "": none.
  void set_grpc_inference_rule(std::string key, std::string value, std::string denial) {
    grpc_rule_ = {std::move(key), std::move(value), std::move(denial)};
  }
  // Report the client's PINGs (kGrpcPings) for the ping policy Python keeps.
  void set_grpc_watch_pings(bool watch) { grpc_watch_pings_ = watch; }
  // A gRPC connection's protocol object, for Python's calls (send_message, finish,
  // reset, shutdown, ping...); null when the connection is gone. After changing it,
  // grpc_wrote() has its output written by the next flush_writes().
  h2::GrpcConnection* grpc(uint64_t connection) const;
  void grpc_wrote(uint64_t connection);
  // gRPC events seen on the connection (calls, messages...), the keepalive's "calls are
  // active" since it last looked.
  uint64_t grpc_activity(uint64_t connection) const;
  // The held calls whose grpc-timeout passed by `now_ns` answered DEADLINE_EXCEEDED as
  // grpc++ answers them, their requests cancelled in the core (dropped if queued,
  // flagged if running), as Triton cancels a call's requests. A turn calls it with the
  // clock when the loop's timer fires; tests with theirs. Deadlines pending: the count.
  void grpc_expire(uint64_t now_ns);
  size_t grpc_deadlines() const { return deadlines_ ? deadlines_->size() : 0; }

  enum class EventKind : uint8_t {
    kAccepted,       // a new connection (lane mode): Python makes its protocol
    kData,           // bytes read in Python mode: for the protocol, or back to lane mode
    kHandOver,       // bytes lane mode leaves to Python: the protocol's, and the connection
    kEof,            // the client half-closed in Python mode
    kClosed,         // the connection is gone (its fd closed)
    kPauseWriting,   // Python mode: the client reads too slowly
    kResumeWriting,  // its unsent bytes drained
    kGrpcAccepted,   // a new gRPC connection: Python makes its call handler
    kGrpcCall,       // an event of a call Python answers: `grpc` (h2::EventKind)
    kGrpcPings,      // the client sent PINGs: `count` in all; `flag`: answers went out
    kTlsFailed,      // the connection is closed for a TLS failure: `data` says which (a
                     // kClosed follows)
  };
  struct Event {
    Event(EventKind kind_, uint64_t connection_, std::string data_ = {})
        : kind(kind_), connection(connection_), data(std::move(data_)) {}
    // A call's event for Python.
    static Event call(uint64_t connection, h2::Event&& grpc) {
      Event event(EventKind::kGrpcCall, connection);
      event.grpc = std::move(grpc);
      return event;
    }
    EventKind kind;
    uint64_t connection;
    std::string data;  // kData, kHandOver
    h2::Event grpc;    // kGrpcCall
    uint64_t count = 0;
    bool flag = false;
  };
  // A completion answered here, for the statistics Python keeps.
  struct Answered {
    uint32_t lane_model = 0;
    uint32_t instance_id = 0;
    uint64_t timings[4] = {0, 0, 0, 0};
    uint32_t successes = 0;
    uint32_t inferences = 0;
    uint64_t request_ns = 0;
    uint64_t queue_ns = 0;
    std::vector<uint64_t> failed_ns;  // per request the statistics count failed
    // Per success (request_ns, queue_ns), when each_ is on (latency summaries).
    std::vector<std::pair<uint64_t, uint64_t>> each;
    // The batch sizes of the requests: one execution each when the core answered
    // ensemble requests together (no instance), else their sum is one execution's.
    std::vector<uint32_t> batch_sizes;
    // Requests whose final response was in the block without an answer (a codec bug):
    // Python fails them (answer()).
    std::vector<uint64_t> lost;
    // False for all but one share of a batch whose requests several loops answered:
    // the batch is one execution, counted once.
    bool execution = true;
  };
  // Binary tensor bytes of the answers this loop wrote: sent from the response block
  // (block_views.h) or copied into the connection's output (TLS, endpoints, small
  // tensors, a block several loops answer from, too much of the arena held already).
  // And of the HTTP requests it took: received straight into the arena (see
  // "receiving in place" above), or copied there from the bytes it had read.
  struct TensorBytes {
    uint64_t out_in_place = 0, out_copied = 0;
    uint64_t in_in_place = 0, in_copied = 0;
    TensorBytes& operator+=(const TensorBytes& other) {
      out_in_place += other.out_in_place;
      out_copied += other.out_copied;
      in_in_place += other.in_in_place;
      in_copied += other.in_copied;
      return *this;
    }
    bool any() const {
      return out_in_place != 0 || out_copied != 0 || in_in_place != 0 || in_copied != 0;
    }
  };
  struct Turn {
    std::vector<Event> events;
    std::vector<Completion> completions;  // for Python, as Core::poll gives them
    std::vector<Answered> answered;
    uint32_t queued = 0, cached = 0, refused = 0;  // lane requests taken this turn
    TensorBytes tensor_bytes;
  };

  // One turn of the loop: accepts, reads, takes, dispatches and writes. `python_open` /
  // `python_waiting`: the arrival counts of the connections Python keeps
  // (scheduling/arrivals.py), added to this loop's own for the batcher's hint. Also
  // hands over the events of calls made since the last turn (pending_events()).
  void run(uint32_t python_open, uint32_t python_waiting, Turn* turn);
  // The core notified: Core::poll, this loop's completions answered and written, the
  // others in `turn` for Python. The core's timer is deferred as in run().
  void poll(uint32_t python_open, uint32_t python_waiting, Turn* turn);
  // Events (closes, write pauses) that calls from Python made and no turn has handed
  // over yet: the caller runs a turn soon when there are any.
  size_t pending_events() const { return events_.size(); }

  // -- Python mode: the protocol's transport ----------------------------------------
  // Sends `data` after whatever is unsent (a partial send keeps the rest).
  void write(uint64_t connection, const char* data, size_t size);
  // Closes once the unsent bytes are out (`abort`: now). True when closed now: the caller
  // reports kClosed itself; else a later run() does.
  bool close(uint64_t connection, bool abort);
  // Shuts the write side once the unsent bytes are out.
  void write_eof(uint64_t connection);
  void pause_reading(uint64_t connection);
  void resume_reading(uint64_t connection);
  size_t unsent(uint64_t connection) const;
  bool is_open(uint64_t connection) const { return connections_.count(connection) != 0; }
  bool in_lane_mode(uint64_t connection) const;
  // The protocol owes and holds nothing: the connection returns to lane mode with
  // `data` (bytes Python received in the meantime), which the lane takes first. A
  // connection taken back by an earlier data event of the same turn gets `data` after
  // what it holds. What it queued, and events (the bytes going back to Python), are in
  // `turn`; the caller flushes the core.
  void take_back(uint64_t connection, const char* data, size_t size, Turn* turn);

  // -- this loop's requests in a completion Python answers ---------------------------
  struct Owned {
    uint32_t lane_model = 0;
    uint32_t batch_size = 0;
    uint64_t submit_ns = 0;
    uint64_t connection = 0;  // a gRPC call's (0 for HTTP, or when its client is gone)
    uint32_t stream = 0;      // a gRPC call's stream (0: an HTTP request)
  };
  bool owned(uint64_t request_id, Owned* out) const;
  // Python's answer (complete HTTP response bytes) to request `request_id` of this loop,
  // which it is no longer after; false when no client waits for it (gone away).
  bool answer(uint64_t request_id, const char* http, size_t size);
  // A gRPC request of this loop that Python answers (through grpc()): no longer this
  // loop's; false when it was not.
  bool release_grpc(uint64_t request_id);
  // Writes what answer() made due (Python calls it once after answering a completion).
  void flush_writes();

  // Arrival counts of the connections in lane mode (scheduling/arrivals.py).
  uint32_t open_count() const { return counted_; }
  uint32_t waiting_count() const { return waiting_; }
  // This loop's requests in flight (not answered yet).
  size_t in_flight() const { return requests_.size(); }
  std::vector<uint64_t> owned_ids() const {
    std::vector<uint64_t> ids;
    for (const auto& entry : requests_) ids.push_back(entry.first);
    return ids;
  }
  // Keep per-request (request_ns, queue_ns) in Answered::each.
  void set_each(bool each) { each_ = each; }

  // The connections limits' sweep (http/connection_limits.py): lane-mode connections
  // that hold part of a request since before `before_ns` (handed to Python, which
  // answers 408), and those to close: idle (nothing owed, nothing held) since before
  // `idle_before_ns` (0: none), or silent (not one byte received) since they were
  // accepted before `before_ns` (0: none), which would otherwise hold a connection slot
  // for good.
  void sweep(uint64_t before_ns, uint64_t idle_before_ns, std::vector<uint64_t>* timed_out,
             std::vector<uint64_t>* idle);
  // Hands a lane-mode connection's partial request to Python (a kHandOver event).
  void hand_over(uint64_t connection);

 private:
  struct Owed {
    uint64_t request_id = 0;  // 0: answered at once (`answer` set)
    bool ready = false;
    // The answer, held until those owed before it are collected; empty when it went
    // straight into the connection's `out` (it was first in line: answer_completion).
    std::string answer;
    OutViews views;  // its tensors sent from their block, spliced into `answer`
    HttpConnection connection = HttpConnection::kKeepAlive;  // how the answer's head says it
  };
  // A ModelInfer call this loop holds: its opening (handed to Python with its message if
  // the lane does not take it), its message, then its request in the core.
  struct GrpcCall {
    h2::Event opened;
    std::string message;
    bool has_message = false;
    uint64_t request_id = 0;
    // A compressed message (grpc_inflate.h): inflated at once when small, else a step
    // per turn; then `message` is its. The half-close that came before it was done.
    std::unique_ptr<grpc::Inflation> inflation;
    bool half_closed = false;
    // Outputs the answer classifies (the lane model's), rarely any.
    uint32_t model = 0;
    std::vector<ClassifiedOutput> classify;
    uint32_t deadline = DeadlineTimer::kNone;  // its grpc-timeout in deadlines_
  };
  struct Connection {
    uint64_t id = 0;
    int fd = -1;
    bool python = false;      // Python mode
    bool py_paused = false;   // the protocol paused reading
    bool eof = false;         // the client half-closed
    bool closing = false;     // close once `out` is sent
    bool shut_after = false;  // shut the write side once `out` is sent
    bool write_paused = false;
    bool counted = false;  // it sent a lane request: counted open for arrivals
    bool waiting = false;  // counted waiting: owes lane answers
    bool want_out = false;
    bool received = false;          // it sent at least one byte
    uint32_t events = 0;            // the epoll events registered
    uint64_t last_read_ns = 0;      // bytes last received
    uint64_t partial_since_ns = 0;  // lane mode holds part of a request since
    // An endpoint's connection: its requests and answers rewritten, and how much of
    // `out` may be sent (past it: an answer head not yet whole).
    std::unique_ptr<EndpointStream> endpoint;
    size_t out_ready = 0;
    std::string in;  // lane mode: received, not taken
    // Lane mode: the request whose tensors are being received in place (null: none),
    // and how many of its bytes have arrived.
    std::unique_ptr<HttpLane::Receiving> receiving;
    size_t receive_at = 0;
    bool collect_whole = false;  // the partial request at the front is not for it
    std::deque<Owed> owed;       // lane mode: answers owed, in request order
    std::string out;             // bytes not yet sent (TLS: not yet encrypted)
    OutViews views;              // tensors sent from their blocks, spliced into `out`
    // TLS (null on a plaintext connection): the session, and the records not yet sent.
    std::unique_ptr<TlsStream> tls;
    std::string wire;
    // gRPC: the protocol (null on an HTTP/1.1 connection) and the calls this loop holds,
    // by stream; every other stream's events are Python's.
    std::unique_ptr<h2::GrpcConnection> h2;
    std::unordered_map<uint32_t, GrpcCall> calls;
    uint32_t grpc_in_flight = 0;  // lane requests in flight
    uint32_t grpc_high = 0;       // the most there were at once (the waiting hint)
    uint64_t activity = 0;        // gRPC events received
    uint64_t pings_seen = 0;      // the client's PINGs reported
    bool answered = false;        // calls answered here since the last PINGs report
    // A relaying loop's connection that needs Python: its events for Python, in order,
    // until it moves to the relay target (finish_moves).
    bool moving = false;
    std::vector<Event> deferred;
  };
  // A completion whose requests several loops own (or another loop alone): each owner
  // answers its own requests from the one response block, freed by the last (`left`).
  struct Share {
    Completion done;
    std::atomic<uint32_t> left{0};
    uint32_t counting = 0;  // the loop whose Answered counts the execution
  };
  // How a connection comes to this loop: new from the acceptor (HTTP/1.1 or gRPC), or
  // moved from a relaying loop with its events for Python.
  enum class Arrival : uint8_t { kHttp, kGrpc, kMoved };
  // What other threads post to this loop (post_connection, post_share, post_turn).
  struct Mailbox {
    std::mutex mutex;
    std::vector<std::pair<std::unique_ptr<Connection>, Arrival>> connections;
    std::vector<std::shared_ptr<Share>> shares;
    Turn relayed;            // relaying loops' leftovers for Python
    bool core_left = false;  // a relaying loop left Python's completions in the core
    int fd = -1;             // eventfd, in epoll_fd_ (kMailboxKey)
  };
  struct Request {
    // Null once its client went away (the request stays until its completion).
    Connection* connection;
    Owed* slot;  // in connection->owed (a deque: stable while only its ends change)
    uint32_t lane_model;
    uint32_t batch_size;
    uint64_t submit_ns;
    uint32_t stream = 0;  // a gRPC call's stream (0: an HTTP request)
  };

  // While it lives, the ids the lane's codec mints are this loop's (IoGroup::owner_of);
  // at other times they are no loop's: loop 0 shares its lane with Python, whose
  // requests no loop answers.
  class TakingIds {
   public:
    explicit TakingIds(HttpIo& io) : codec_(io.lane_.codec()) {
      codec_.set_id_owner(io.group_ == nullptr ? 0 : io.index_ + 1);
    }
    ~TakingIds() { codec_.set_id_owner(0); }
    TakingIds(const TakingIds&) = delete;
    TakingIds& operator=(const TakingIds&) = delete;

   private:
    KServeCodec& codec_;
  };
  // Accepts the connections waiting on `listen_fd` (`grpc`: the gRPC listener's;
  // `routes`: an endpoint's).
  void accept_all(int listen_fd, bool grpc, const EndpointRoutes* routes = nullptr);
  // The bytes at the front of `out` that may be sent now (an endpoint's answers
  // rewritten first).
  size_t ready_to_send(Connection* c);
  // gRPC (grpc_io.cc).
  void grpc_accepted(Connection* c);
  void grpc_received(Connection* c, const char* data, size_t size);
  void grpc_event(Connection* c, h2::Event& event);
  // Hands a held call to Python: its opening, its message if any, then `then` if given.
  void grpc_to_python(Connection* c, uint32_t stream, h2::Event* then);
  void grpc_submit(Connection* c, uint32_t stream, GrpcCall& call);
  // `block` (null: copied): the response block its tensors may be sent from.
  void grpc_answer(Connection* c, uint32_t stream, const InferResponse& response,
                   const std::shared_ptr<HeldBlock>& block);
  // The call ends here (answered, reset, or its client gone).
  void grpc_call_done(Connection* c, uint32_t stream);
  // The call carries what a restricted inference protocol asks for (set_grpc_inference_rule).
  bool grpc_admits(const h2::Event& call) const;
  // The call ends with its request, if queued or running, cancelled in the core (the
  // client reset it, or its deadline passed).
  void grpc_cancel(Connection* c, uint32_t stream, GrpcCall& call);
  // A step of a held call's inflation; once done and half-closed, the call is submitted
  // (grpc_submit refuses a damaged or too large message). True when done.
  bool grpc_inflate_step(Connection* c, uint32_t stream, GrpcCall& call);
  // A turn's step of the first inflation waiting (inflating_), read when inflate_fd_ is.
  void grpc_inflate_turn();
  // The message a held call's request is read from.
  static std::string_view grpc_message_of(const GrpcCall& call) {
    return call.inflation ? call.inflation->message() : std::string_view(call.message);
  }
  // Moves the protocol's output into `out`; closing once the protocol is done.
  void grpc_collect(Connection* c);
  void grpc_pings(Connection* c);
  void on_readable(Connection* c);
  // Lane mode: the client half-closed.
  void on_end_of_stream(Connection* c);
  // TLS: the plaintext `got` bytes of read_buffer_ hold (into tls_plain_), and the
  // records they made due queued to send; false when the connection is gone.
  // `closed`: the client sent close_notify.
  bool tls_received(Connection* c, size_t got, bool* closed);
  // Closes a connection for a TLS failure (kTlsFailed, then kClosed), sending the alert
  // its session made if the socket takes it now.
  void tls_failed(Connection* c, const std::string& why);
  // Shuts the write side (TLS: after close_notify).
  void shut_write(Connection* c);
  // Bytes not yet on the wire, plaintext and records (the back-pressure measures).
  static size_t unsent_of(const Connection* c) {
    return c->out.size() + c->views.bytes() + c->wire.size();
  }
  // Lane mode: takes what it can of c->in; the rest goes to Python when nothing is owed.
  void process_input(Connection* c);
  // A request the lane took: owed on `c` (answered at once, or queued).
  void owe(Connection* c, HttpLane::Taken& taken, uint64_t now);
  // Receiving in place: the partial request at the front of c->in (`scanned`) placed in
  // the arena by the lane, the tensor bytes c->in holds copied there; false when the
  // lane does not take it so.
  bool begin_receiving(Connection* c, const ScannedRequest& scanned);
  // The next read of a connection receiving in place: into the request's pieces, and
  // what follows its end into read_buffer_ (the next requests).
  void receive_in_place(Connection* c);
  // The request received in place is given up (its client went away, or timed out).
  void abandon_receiving(Connection* c);
  // Answers `done` if its requests are all this loop's (false: Python's). With `share`
  // (a Share's completion), answers this loop's requests among them and leaves the
  // block to the Share; its statistics go to `answered`.
  bool answer_completion(const Completion& done, std::vector<Answered>* answered,
                         const Share* share = nullptr);
  // A completion the core gave this loop's thread: answered here, posted to the loops
  // that own its requests, or left to Python in `turn`.
  void route(Completion&& done, Turn* turn);
  // This loop's part of a share; the block is freed by the last loop done with it.
  void answer_share(Share& share);
  // Another thread's hand-over, under mail_.mutex; wakes this loop.
  void post_connection(std::unique_ptr<Connection> connection, Arrival arrival);
  void post_share(std::shared_ptr<Share> share);
  // A relaying loop's leftovers for Python, handed over with this loop's next turn.
  void post_turn(Turn&& turn);
  // A relaying loop left completions for Python in the core (Core::poll's
  // left_unowned): this loop's next turn polls it.
  void post_core_left();
  // Core::poll and the routing of what it gave (a relaying loop leaves Python's
  // completions there, and wakes its target to take them).
  void take_completions(uint32_t python_open, uint32_t python_waiting, Turn* turn);
  // take_completions, when a relaying loop said it left some (core_left_).
  void take_left(uint32_t python_open, uint32_t python_waiting, Turn* turn);
  // The owner's side: adopts the connections, answers the shares and keeps the
  // leftovers posted.
  void take_mail();
  // A connection accepted here or handed over: registered, and announced to Python
  // (with its events for Python, when moved).
  void adopt(std::unique_ptr<Connection> connection, Arrival arrival);
  // An event of `c` for Python: queued, or kept in `c` until it moves (relaying).
  void python_event(Connection* c, Event&& event);
  // Relaying: the connections marked moving that owe nothing here go to the target.
  void finish_moves();
  // Moves the due answers (the ready ones at the front) into `out`, and takes the
  // bytes that waited for room.
  void collect_due(Connection* c);
  // Sends what it can of `out`; false when the connection is gone.
  bool send_out(Connection* c);
  void touch(Connection* c);
  void update_events(Connection* c);
  void update_waiting(Connection* c);
  void count_open(Connection* c);
  // Closes the connection; `report`: a kClosed event tells Python.
  void destroy(Connection* c, bool report);
  // Hands the turn's counts and events to `turn`.
  void hand_events(Turn* turn);
  // The ready events of one epoll_wait: accepts, reads and takes.
  void handle_ready(const epoll_event* events, int ready);
  // Written what is due; the core flushed if bytes that waited were taken meanwhile.
  void write_due(uint32_t python_open, uint32_t python_waiting);
  // A batch is held back for an instance that is idle, and this loop's clients could
  // still send (the batcher's arrivals hint): rather than sleep, and wake when they
  // do, the turn polls for them up to spin_ns_ (never past the batch's deadline), so
  // that the batch leaves as they come with no timer set (Core::defer_timer) and no
  // sleep. Only the idle instance's time is spent: the policy holds nothing while every
  // instance is busy. A spin the arrivals did not end makes the next ones rarer
  // (spin_skips_), so clients that keep a connection open without sending cost little.
  void spin_for_arrivals(uint32_t python_open, uint32_t python_waiting);
  // Lane mode leaves the connection and its received bytes to Python (kHandOver).
  void to_python(Connection* c);
  // Whether any client could still send (the batcher's hint): this loop's, Python's,
  // and the group's other loops' connections.
  bool arrivals_possible(uint32_t python_open, uint32_t python_waiting) const {
    if (group_ != nullptr) group_->others(index_, &python_open, &python_waiting);
    return python_open + counted_ > python_waiting + waiting_;
  }
  // This loop's arrival counts, for the group's other loops (no group: nothing).
  void publish_counts() {
    if (group_ != nullptr) group_->publish(index_, counted_, waiting_);
  }
  Connection* find(uint64_t id) const {
    auto found = connections_.find(id);
    return found == connections_.end() ? nullptr : found->second.get();
  }

  // epoll data of the gRPC listener (connection ids count up from 1; HTTP's is 0).
  static constexpr uint64_t kGrpcListenerKey = ~uint64_t(0);
  // The endpoint listeners' count down from below it (there are two kinds).
  static constexpr uint64_t kEndpointListenerKey = ~uint64_t(0) - 1;
  static constexpr uint64_t kMailboxKey = kEndpointListenerKey - 64;
  // The eventfd that is readable while gRPC messages inflate (inflate_fd_).
  static constexpr uint64_t kInflateKey = uint64_t(1) << 63;
  static constexpr uint64_t kDeadlineKey = kInflateKey + 1;  // deadlines_'s timerfd
  struct EndpointListener {
    int fd;
    std::unique_ptr<EndpointRoutes> routes;  // the connections' streams point into it
  };
  std::vector<EndpointListener> endpoint_listeners_;

  HttpLane& lane_;
  Core& core_;
  int listen_fd_;
  // gRPC: the listener (-1: none), its lane and connection limits.
  int grpc_listen_fd_ = -1;
  GrpcLane* grpc_lane_ = nullptr;
  h2::Limits grpc_limits_;
  bool grpc_taking_ = true;
  bool grpc_watch_pings_ = false;
  bool keep_grpc_ = false;
  struct GrpcRule {
    std::string key, value, denial;
  } grpc_rule_;
  GrpcResponseWriter grpc_writer_;
  // Held calls whose messages inflate a step per turn (connection, stream), one after
  // the other (so that one bomb's worth is held at a time); while there are any,
  // inflate_fd_, an eventfd in the epoll set, is readable, and the event loop runs turns.
  std::deque<std::pair<uint64_t, uint32_t>> inflating_;
  int inflate_fd_ = -1;
  std::unique_ptr<DeadlineTimer> deadlines_;  // the held calls' grpc-timeouts
  std::string grpc_scratch_;
  std::vector<std::string_view> grpc_parts_;
  int epoll_fd_ = -1;
  bool listening_ = true;
  std::shared_ptr<const TlsContext> http_tls_, grpc_tls_;
  std::string tls_plain_;  // a TLS read's plaintext
  bool taking_ = true;
  uint64_t spin_ns_ = kSpinNs;
  uint32_t spin_misses_ = 0;  // spins in a row that the arrivals did not end
  uint32_t spin_skips_ = 0;   // chances to spin left out before the next spin
  bool each_ = false;
  size_t max_body_ = size_t(1) << 30;
  uint64_t next_connection_ = 1;
  IoGroup* group_ = nullptr;      // null: this loop alone
  HttpIo* relay_ = nullptr;       // null: this loop hands Python its own events
  std::vector<uint64_t> moving_;  // connections marked moving, in order
  uint64_t moved_ = 0;
  std::vector<Completion> relayed_completions_;  // posted leftovers, for the next turn
  bool core_left_ = false;  // the mailbox said: Python's completions wait in the core
  std::function<void()> after_core_poll_;  // set_after_core_poll
  uint32_t index_ = 0;
  uint64_t connection_stride_ = 1;  // the group's size
  uint64_t served_ = 0;
  Mailbox mail_;
  std::vector<Answered> share_answered_;  // shares answered since the last hand_events
  uint32_t counted_ = 0, waiting_ = 0;
  // Bytes of response blocks held for views not yet sent (block_views.h), and the most
  // that may be: past it, tensors are copied, so that slow readers cannot fill the arena.
  uint64_t held_bytes_ = 0;
  TensorBytes tensor_bytes_;  // since the last hand_events
  // Arena bytes placed for requests being received in place, and the most that may be
  // (a quarter of the arena: clients that send slowly cannot fill it).
  uint64_t receiving_bytes_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::unordered_map<uint64_t, Request> requests_;  // this loop's requests in flight
  // Answered requests' nodes, for the next ones (each is assigned whole).
  SpareNodes<std::unordered_map<uint64_t, Request>> spare_requests_{1024};
  std::vector<Connection*> touched_;                // owe a write this turn
  std::vector<Event> events_;                       // for Python, in order
  uint32_t queued_ = 0, cached_ = 0, refused_ = 0;  // since the last hand_events
  std::vector<HttpLane::Taken> taken_;
  std::vector<KServeCodec::Answer> answers_;
  std::string read_buffer_;
  std::string endpoint_scratch_;  // an endpoint connection's read, rewritten
};

}  // namespace naiad
