#include "http1/http_io.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <iterator>
#include <stdexcept>

#include "http1/http_scan.h"
#include "ipc/response_block.h"

namespace naiad {

namespace {

// epoll data of the listener (connection ids start at 1).
constexpr uint64_t kListenerKey = 0;
// Unsent bytes past which a Python-mode protocol is told to stop writing (uvloop's
// default high-water mark), and under which it may write again; lane mode stops
// reading past the high mark.
constexpr size_t kHighWater = 64 * 1024;
constexpr size_t kLowWater = 16 * 1024;
// Unsent bytes past which a gRPC connection is not read: room for a few large answers
// (flow control bounds what its streams queue), none for a client that does not read.
constexpr size_t kGrpcHighWater = 8 << 20;
// Bytes of a request head still arriving that lane mode holds (a head the TCP stream
// split); past it, with no head end in sight, they go to Python (431).
constexpr size_t kMaxLanePartial = 64 * 1024;
// A request arriving in pieces is collected in one buffer of its size at once up to
// this size, larger ones once a quarter of them has arrived (the general path's rule).
constexpr size_t kReserveAtOnce = size_t(1) << 20;
constexpr size_t kReadSize = 256 * 1024;
// Lane mode reads at most this much at a time until it knows whether the request at
// the front is received in place: a large request's tensors after its header are then
// mostly received in place rather than read here and copied.
constexpr size_t kHeadReadSize = 64 * 1024;
constexpr int kMaxEvents = 256;
// The first byte of a TLS ClientHello (a handshake record): no HTTP/1.1 request nor the
// HTTP/2 preface starts with it.
constexpr char kTlsHandshakeRecord = 0x16;

// For one turn of the loop (run, poll): the core's timer is set once, as the turn
// ends, to nothing when what the turn held back left before it ended. A deadline that
// passes meanwhile is met by the turn itself (Core::dispatch_due between its events
// and writes), or as it ends.
struct TimerDeferral {
  Core& core;
  explicit TimerDeferral(Core& c) : core(c) { core.defer_timer(); }
  ~TimerDeferral() { core.settle_timer(); }
};

void epoll_set(int epoll_fd, int op, int fd, uint32_t events, uint64_t key) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = key;
  epoll_ctl(epoll_fd, op, fd, &event);
}

// "address:port" of the socket's peer, for the log line of a failed connection.
std::string peer_of(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  return std::string(text) + ":" + std::to_string(port);
}

// Sends what the socket takes now and drops the rest: for the last bytes of a
// connection being closed (a TLS alert).
void send_last(int fd, const std::string& bytes) {
  if (!bytes.empty()) ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

HttpIo::HttpIo(HttpLane& lane, Core& core, int listen_fd)
    : lane_(lane), core_(core), listen_fd_(listen_fd) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::runtime_error(std::string("epoll_create1: ") + strerror(errno));
  if (listen_fd_ >= 0) {
    epoll_set(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, EPOLLIN, kListenerKey);
  } else {
    listening_ = false;
  }
  mail_.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (mail_.fd < 0) {
    ::close(epoll_fd_);
    throw std::runtime_error(std::string("eventfd: ") + strerror(errno));
  }
  epoll_set(epoll_fd_, EPOLL_CTL_ADD, mail_.fd, EPOLLIN, kMailboxKey);
  read_buffer_.resize(kReadSize);
}

void HttpIo::join(IoGroup* group, uint32_t index) {
  group_ = group;
  index_ = index;
  next_connection_ = index + 1;
  connection_stride_ = group->size();
}

HttpIo::~HttpIo() {
  for (auto& entry : connections_) ::close(entry.second->fd);
  for (auto& posted : mail_.connections) ::close(posted.first->fd);
  ::close(mail_.fd);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (inflate_fd_ >= 0) ::close(inflate_fd_);
}

void HttpIo::listen_http(int listen_fd) {
  if (listen_fd_ >= 0 || listen_fd < 0) return;
  listen_fd_ = listen_fd;
  listening_ = true;
  epoll_set(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, EPOLLIN, kListenerKey);
}

void HttpIo::set_tls(bool grpc, std::shared_ptr<const TlsContext> context) {
  (grpc ? grpc_tls_ : http_tls_) = std::move(context);
}

void HttpIo::listen_endpoint(int listen_fd, const EndpointRoutes& routes) {
  auto compiled = std::make_unique<EndpointRoutes>(routes);
  compile_endpoint_routes(compiled.get());  // throws before anything is registered
  const uint64_t key = kEndpointListenerKey - endpoint_listeners_.size();
  endpoint_listeners_.push_back({listen_fd, std::move(compiled)});
  epoll_set(epoll_fd_, EPOLL_CTL_ADD, listen_fd, EPOLLIN, key);
}

void HttpIo::stop_listening() {
  for (EndpointListener& listener : endpoint_listeners_) {
    if (listener.fd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listener.fd, nullptr);
    listener.fd = -1;  // its routes stay: the open connections read through them
  }
  if (!listening_ || listen_fd_ < 0) return;
  listening_ = false;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
}

void HttpIo::run(uint32_t python_open, uint32_t python_waiting, Turn* turn) {
  {
    TimerDeferral deferral(core_);
    Core::Turn submits(core_);  // queued under one lock, at the turn's flush
    epoll_event events[kMaxEvents];
    handle_ready(events, epoll_wait(epoll_fd_, events, kMaxEvents, 0));
    if (queued_ != 0) core_.flush(arrivals_possible(python_open, python_waiting));
    take_left(python_open, python_waiting, turn);
    write_due(python_open, python_waiting);
    spin_for_arrivals(python_open, python_waiting);
    if (core_left_) {  // the mailbox said so during the spin
      take_left(python_open, python_waiting, turn);
      write_due(python_open, python_waiting);
    }
  }
  finish_moves();
  hand_events(turn);
}

void HttpIo::take_left(uint32_t python_open, uint32_t python_waiting, Turn* turn) {
  if (!core_left_) return;
  core_left_ = false;
  take_completions(python_open, python_waiting, turn);
}

void HttpIo::take_completions(uint32_t python_open, uint32_t python_waiting, Turn* turn) {
  // A relaying loop leaves Python's completions in the core for its target, the one
  // loop that takes them: posted from here they could reach Python after later ones
  // that the target polled meanwhile (a decoupled stream's responses out of order, or
  // after its final one, and so lost).
  bool left = false;
  std::vector<Completion> done = core_.poll(arrivals_possible(python_open, python_waiting),
                                            relay_ != nullptr ? &left : nullptr);
  if (after_core_poll_) after_core_poll_();
  for (Completion& completion : done) route(std::move(completion), turn);
  if (left) relay_->post_core_left();
}

void HttpIo::handle_ready(const epoll_event* events, int ready) {
  for (int e = 0; e < ready; ++e) {
    const uint64_t key = events[e].data.u64;
    if (key == kListenerKey || key == kGrpcListenerKey) {
      accept_all(key == kListenerKey ? listen_fd_ : grpc_listen_fd_, key == kGrpcListenerKey);
      continue;
    }
    if (key == kMailboxKey) {
      take_mail();
      continue;
    }
    if (key <= kEndpointListenerKey && kEndpointListenerKey - key < endpoint_listeners_.size()) {
      const EndpointListener& listener = endpoint_listeners_[kEndpointListenerKey - key];
      if (listener.fd >= 0) accept_all(listener.fd, false, listener.routes.get());
      continue;
    }
    if (key == kInflateKey) {
      grpc_inflate_turn();
      continue;
    }
    if (key == kDeadlineKey) {
      grpc_expire(monotonic_ns());
      continue;
    }
    Connection* c = find(key);
    if (c == nullptr) continue;  // closed earlier in this turn
    if ((events[e].events & (EPOLLERR | EPOLLHUP)) && (c->eof || c->closing)) {
      // Reset after it half-closed: nothing more can reach it (and epoll would report
      // it on every turn, read or not). Its owed requests are cancelled.
      destroy(c, true);
      continue;
    }
    if ((events[e].events & EPOLLOUT) && !send_out(c)) continue;
    if (events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
    core_.dispatch_due();
  }
}

void HttpIo::spin_for_arrivals(uint32_t python_open, uint32_t python_waiting) {
  // Only arrivals on this loop's own connections end a spin (Python reads the others).
  if (spin_ns_ == 0 || !taking_ || counted_ <= waiting_) return;
  uint64_t held = core_.held_for_idle();
  if (held == 0) return;
  if (spin_skips_ != 0) {  // a chance to spin left out
    --spin_skips_;
    return;
  }
  const uint64_t until = std::min(held, core_.now() + spin_ns_);
  epoll_event events[kMaxEvents];
  for (;;) {
    const int ready = epoll_wait(epoll_fd_, events, kMaxEvents, 0);
    if (ready > 0) {
      const uint32_t queued_before = queued_;
      handle_ready(events, ready);
      if (queued_ != queued_before) core_.flush(arrivals_possible(python_open, python_waiting));
      write_due(python_open, python_waiting);
      held = core_.held_for_idle();
      if (held == 0) {  // the batch left
        spin_misses_ = 0;
        return;
      }
    }
    if (core_.now() >= until) break;
  }
  // They did not come in time: what is due leaves now, and the next spins get rarer
  // (1, 3, 7 ... up to 63 chances left out) while they keep not coming.
  core_.flush(arrivals_possible(python_open, python_waiting));
  spin_misses_ = std::min<uint32_t>(spin_misses_ + 1, 6);
  spin_skips_ = (1u << spin_misses_) - 1;
}

void HttpIo::write_due(uint32_t python_open, uint32_t python_waiting) {
  const uint32_t queued_before_writes = queued_;
  flush_writes();
  // Bytes that waited for room were taken as the answers went out.
  if (queued_ != queued_before_writes) core_.flush(arrivals_possible(python_open, python_waiting));
}

void HttpIo::hand_events(Turn* turn) {
  for (Completion& done : relayed_completions_) turn->completions.push_back(std::move(done));
  relayed_completions_.clear();
  for (Answered& stats : share_answered_) turn->answered.push_back(std::move(stats));
  share_answered_.clear();
  turn->queued += queued_;
  turn->cached += cached_;
  turn->refused += refused_;
  queued_ = cached_ = refused_ = 0;
  turn->tensor_bytes += tensor_bytes_;
  tensor_bytes_ = TensorBytes();
  if (turn->events.empty()) {
    turn->events.swap(events_);
  } else {
    turn->events.insert(turn->events.end(), std::make_move_iterator(events_.begin()),
                        std::make_move_iterator(events_.end()));
    events_.clear();
  }
  if (relay_ != nullptr) {
    // Nothing for Python here: the turn goes to the relay target (route() put the
    // completions Python answers in it too), and the caller gets it empty.
    if (!turn->events.empty() || !turn->completions.empty() || !turn->answered.empty() ||
        turn->queued != 0 || turn->cached != 0 || turn->refused != 0 || turn->tensor_bytes.any()) {
      relay_->post_turn(std::move(*turn));
    }
    *turn = Turn();
  }
}

void HttpIo::poll(uint32_t python_open, uint32_t python_waiting, Turn* turn) {
  {
    // Deferred like run(): a batch held as the completions come in would otherwise set
    // the timer at once, and its deadline would mostly pass while this turn writes the
    // answers, the timer thread preempting it.
    TimerDeferral deferral(core_);
    Core::Turn submits(core_);
    core_left_ = false;  // taken now, with the rest
    take_completions(python_open, python_waiting, turn);
    write_due(python_open, python_waiting);
  }
  finish_moves();
  hand_events(turn);
}

void HttpIo::accept_all(int listen_fd, bool grpc, const EndpointRoutes* routes) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of fds: the rest wait in the backlog
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto connection = std::make_unique<Connection>();
    Connection* c = connection.get();
    const auto& tls = grpc ? grpc_tls_ : http_tls_;
    if (tls && routes == nullptr) {  // the endpoints are plaintext, as Triton's
      try {
        c->tls = std::make_unique<TlsStream>(tls);
      } catch (const std::exception&) {  // out of memory in OpenSSL: not served
        ::close(fd);
        continue;
      }
    }
    c->fd = fd;
    c->last_read_ns = monotonic_ns();
    if (routes != nullptr) c->endpoint = std::make_unique<EndpointStream>(*routes);
    const uint32_t target =
        group_ == nullptr || (grpc && keep_grpc_) ? index_ : group_->next_loop();
    const Arrival arrival = grpc ? Arrival::kGrpc : Arrival::kHttp;
    if (target == index_) {
      adopt(std::move(connection), arrival);
    } else {
      group_->loop(target).post_connection(std::move(connection), arrival);
    }
  }
}

void HttpIo::adopt(std::unique_ptr<Connection> connection, Arrival arrival) {
  Connection* c = connection.get();
  c->id = next_connection_;
  next_connection_ += connection_stride_;
  ++served_;
  connections_.emplace(c->id, std::move(connection));
  c->events = EPOLLIN;
  epoll_set(epoll_fd_, EPOLL_CTL_ADD, c->fd, c->events, c->id);
  if (arrival == Arrival::kGrpc) {
    grpc_accepted(c);
  } else if (arrival == Arrival::kHttp) {
    if (relay_ == nullptr) events_.push_back(Event{EventKind::kAccepted, c->id, {}});
  } else {
    // Moved from a relaying loop: Python meets it now, with what it has to hear.
    events_.push_back(Event{c->h2 ? EventKind::kGrpcAccepted : EventKind::kAccepted, c->id, {}});
    for (Event& event : c->deferred) {
      event.connection = c->id;
      python_event(c, std::move(event));
    }
    c->deferred.clear();
    c->deferred.shrink_to_fit();
    c->moving = false;
    update_events(c);
    touch(c);  // what it had not sent yet
  }
}

void HttpIo::python_event(Connection* c, Event&& event) {
  if (relay_ == nullptr) {
    events_.push_back(std::move(event));
    return;
  }
  c->deferred.push_back(std::move(event));
  if (!c->moving) {
    c->moving = true;
    moving_.push_back(c->id);
    update_events(c);
  }
}

void HttpIo::finish_moves() {
  if (moving_.empty()) return;
  std::vector<uint64_t> waiting;
  for (uint64_t id : moving_) {
    Connection* c = find(id);
    if (c == nullptr) continue;  // closed meanwhile: Python never knew it
    if (!c->views.empty()) {     // they hold blocks this loop counts (held_bytes_): sent first
      waiting.push_back(id);
      continue;
    }
    if (c->h2) {
      if (c->grpc_in_flight != 0) {  // its lane calls are answered here first
        waiting.push_back(id);
        continue;
      }
      // Calls held but not submitted are Python's, with the connection.
      std::vector<uint32_t> held;
      for (const auto& call : c->calls) held.push_back(call.first);
      for (uint32_t stream : held) grpc_to_python(c, stream, nullptr);
    }
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    touched_.erase(std::remove(touched_.begin(), touched_.end(), c), touched_.end());
    update_waiting(c);
    if (c->counted) {
      c->counted = false;
      --counted_;
      publish_counts();
    }
    auto found = connections_.find(id);
    std::unique_ptr<Connection> connection = std::move(found->second);
    connections_.erase(found);
    ++moved_;
    relay_->post_connection(std::move(connection), Arrival::kMoved);
  }
  moving_.swap(waiting);
}

void HttpIo::post_turn(Turn&& turn) {
  // Counts alone wait for the next wake-up: they are statistics, not work.
  const bool wake = !turn.events.empty() || !turn.completions.empty() || !turn.answered.empty();
  {
    std::lock_guard<std::mutex> lock(mail_.mutex);
    Turn& kept = mail_.relayed;
    for (Event& event : turn.events) kept.events.push_back(std::move(event));
    for (Completion& done : turn.completions) kept.completions.push_back(std::move(done));
    for (Answered& stats : turn.answered) kept.answered.push_back(std::move(stats));
    kept.queued += turn.queued;
    kept.cached += turn.cached;
    kept.refused += turn.refused;
    kept.tensor_bytes += turn.tensor_bytes;
  }
  if (!wake) return;
  const uint64_t one = 1;
  (void)!::write(mail_.fd, &one, sizeof one);
}

void HttpIo::post_connection(std::unique_ptr<Connection> connection, Arrival arrival) {
  {
    std::lock_guard<std::mutex> lock(mail_.mutex);
    mail_.connections.emplace_back(std::move(connection), arrival);
  }
  const uint64_t one = 1;
  (void)!::write(mail_.fd, &one, sizeof one);
}

void HttpIo::post_share(std::shared_ptr<Share> share) {
  {
    std::lock_guard<std::mutex> lock(mail_.mutex);
    mail_.shares.push_back(std::move(share));
  }
  const uint64_t one = 1;
  (void)!::write(mail_.fd, &one, sizeof one);
}

void HttpIo::post_core_left() {
  {
    std::lock_guard<std::mutex> lock(mail_.mutex);
    mail_.core_left = true;
  }
  const uint64_t one = 1;
  (void)!::write(mail_.fd, &one, sizeof one);
}

void HttpIo::take_mail() {
  uint64_t count;
  (void)!::read(mail_.fd, &count, sizeof count);
  std::vector<std::pair<std::unique_ptr<Connection>, Arrival>> connections;
  std::vector<std::shared_ptr<Share>> shares;
  Turn relayed;
  {
    std::lock_guard<std::mutex> lock(mail_.mutex);
    connections.swap(mail_.connections);
    shares.swap(mail_.shares);
    std::swap(relayed, mail_.relayed);
    core_left_ = core_left_ || mail_.core_left;
    mail_.core_left = false;
  }
  for (auto& posted : connections) adopt(std::move(posted.first), posted.second);
  for (auto& share : shares) answer_share(*share);
  for (Event& event : relayed.events) events_.push_back(std::move(event));
  for (Completion& done : relayed.completions) relayed_completions_.push_back(std::move(done));
  for (Answered& stats : relayed.answered) share_answered_.push_back(std::move(stats));
  // Its requests are counted with this loop's (queued_ is also the flush hint of a
  // take_back's caller: the relaying loop flushed its own).
  queued_ += relayed.queued;
  cached_ += relayed.cached;
  refused_ += relayed.refused;
  tensor_bytes_ += relayed.tensor_bytes;
}

void HttpIo::route(Completion&& done, Turn* turn) {
  uint64_t owners = 0;  // bit i: loop i owns some of its requests
  bool unowned = false;
  if (group_ != nullptr) {
    for (uint64_t id : done.request_ids) {
      const int owner = group_->owner_of(id);
      if (owner < 0) {
        unowned = true;
        break;
      }
      owners |= uint64_t(1) << owner;
    }
  }
  // Alone, or a completion that is this loop's or Python's: as it always was. A failed
  // batch, or one whose block cannot be read, is Python's to fail whoever owns it.
  ResponseBlockView view;
  Arena& arena = core_.arena();
  if (group_ == nullptr || unowned || owners == uint64_t(1) << index_ ||
      done.status != kCompletionOk || done.result_offset == 0 ||
      done.result_offset > arena.size() || done.result_size > arena.size() - done.result_offset ||
      !view_response_block(arena.base() + done.result_offset, done.result_size, &view)) {
    if (!answer_completion(done, &turn->answered)) turn->completions.push_back(std::move(done));
    return;
  }
  auto share = std::make_shared<Share>();
  share->done = std::move(done);
  share->left.store(static_cast<uint32_t>(__builtin_popcountll(owners)));
  share->counting = static_cast<uint32_t>(__builtin_ctzll(owners));
  for (uint32_t loop = 0; owners != 0; ++loop, owners >>= 1) {
    if (!(owners & 1)) continue;
    if (loop == index_) {
      answer_share(*share);
    } else {
      group_->loop(loop).post_share(share);
    }
  }
}

void HttpIo::answer_share(Share& share) {
  if (!answer_completion(share.done, &share_answered_, &share)) {
    // Nothing of this loop's was in it (its clients' requests stay until their
    // completion, so this is a codec that could not read the block): the requests
    // this loop owns are failed by Python, as lost ones.
    Answered stats;
    stats.instance_id = share.done.instance_id;
    stats.execution = index_ == share.counting;
    for (uint64_t id : share.done.request_ids) {
      if (requests_.count(id)) stats.lost.push_back(id);
    }
    share_answered_.push_back(std::move(stats));
  }
  if (share.left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    core_.arena().free(share.done.result_offset);
  }
}

void HttpIo::update_events(Connection* c) {
  // A connection moving to the relay target is read there.
  bool reading = !c->eof && !c->closing && !c->moving;
  if (c->h2) {
    reading = reading && unsent_of(c) < kGrpcHighWater;
  } else if (c->python) {
    reading = reading && !c->py_paused;
  } else {
    // Lane mode reads on while it can take more: not while bytes wait for the owed
    // answers (they go to Python next, or to the lane once there is room), nor while
    // the client does not read its answers.
    const bool waiting_bytes = !c->in.empty() && c->partial_since_ns == 0;
    reading =
        reading && !waiting_bytes && c->owed.size() < kHttpMaxPipeline && unsent_of(c) < kHighWater;
  }
  // TLS: plaintext waiting for the handshake has nothing to send yet.
  const bool sendable = c->tls ? !c->wire.empty() : !c->out.empty() || !c->views.empty();
  uint32_t wanted = (reading ? uint32_t(EPOLLIN) : 0u) | (sendable ? uint32_t(EPOLLOUT) : 0u);
  if (wanted != c->events) {
    c->events = wanted;
    epoll_set(epoll_fd_, EPOLL_CTL_MOD, c->fd, wanted, c->id);
  }
}

void HttpIo::count_open(Connection* c) {
  if (!c->counted) {
    c->counted = true;
    ++counted_;
    publish_counts();
  }
}

void HttpIo::update_waiting(Connection* c) {
  // A gRPC client waits when it has as many calls in flight as it ever had (it sends
  // no more until one is answered).
  const bool waiting =
      c->h2 ? c->counted && c->grpc_in_flight != 0 && c->grpc_in_flight >= c->grpc_high
            : c->counted && !c->owed.empty();
  if (waiting != c->waiting) {
    c->waiting = waiting;
    if (waiting) {
      ++waiting_;
    } else {
      --waiting_;
    }
    publish_counts();
  }
}

void HttpIo::on_readable(Connection* c) {
  if (c->eof || c->closing) return;
  if (c->receiving) {
    receive_in_place(c);
    return;
  }
  const bool may_place =
      !c->python && !c->h2 && !c->tls && !c->endpoint && taking_ && !c->collect_whole;
  ssize_t got;
  do {
    got = ::read(c->fd, &read_buffer_[0], may_place ? kHeadReadSize : read_buffer_.size());
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    destroy(c, true);  // reset by the peer
    return;
  }
  const char* data = read_buffer_.data();
  size_t size = static_cast<size_t>(got);
  if (got > 0 && !c->received && !c->tls && read_buffer_[0] == kTlsHandshakeRecord) {
    tls_failed(c, "a TLS handshake on a port that serves without TLS");
    return;
  }
  if (got > 0 && c->tls) {
    bool closed = false;
    if (!tls_received(c, size, &closed)) return;
    c->last_read_ns = monotonic_ns();
    c->received = true;
    data = tls_plain_.data();
    size = tls_plain_.size();
    if (size == 0) {
      if (!closed) {  // the handshake, or a record not all there yet
        update_events(c);
        return;
      }
      got = 0;  // close_notify: as the end of the stream
    }
  }
  if (got == 0) {
    c->eof = true;
    if (c->h2) {  // gRPC: the client is done with the connection
      destroy(c, true);
      return;
    }
    if (c->python) {
      python_event(c, Event{EventKind::kEof, c->id, {}});
      update_events(c);
      return;
    }
    on_end_of_stream(c);
    return;
  }
  c->last_read_ns = monotonic_ns();
  c->received = true;
  if (c->h2) {
    grpc_received(c, data, size);
    return;
  }
  if (c->endpoint) {
    endpoint_scratch_.clear();
    c->endpoint->requests(data, size, &endpoint_scratch_);
    data = endpoint_scratch_.data();
    size = endpoint_scratch_.size();
    if (size == 0) return;  // part of a head, held until it is whole
  }
  if (c->python) {
    python_event(c, Event{EventKind::kData, c->id, std::string(data, size)});
    return;
  }
  c->in.append(data, size);
  process_input(c);
}

void HttpIo::on_end_of_stream(Connection* c) {
  c->eof = true;
  // The requests it sent are answered, then the connection closes. A partial request
  // left is dropped with it, as the parser drops an unfinished one.
  if (c->owed.empty() && unsent_of(c) == 0) {
    destroy(c, true);
    return;
  }
  c->closing = true;
  update_events(c);
}

bool HttpIo::tls_received(Connection* c, size_t got, bool* closed) {
  tls_plain_.clear();
  const bool was_established = c->tls->established();
  const TlsStream::Status status = c->tls->receive(read_buffer_.data(), got, &tls_plain_);
  if (status == TlsStream::Status::kFailed) {
    tls_failed(c, c->tls->error());
    return false;
  }
  *closed = status == TlsStream::Status::kClosed;
  // The handshake's answers go out this turn, and with the handshake done the plaintext
  // that waited for it (gRPC's SETTINGS) too.
  if (c->tls->has_output() || (!was_established && c->tls->established() && !c->out.empty())) {
    touch(c);
  }
  return true;
}

void HttpIo::tls_failed(Connection* c, const std::string& why) {
  events_.push_back(Event{EventKind::kTlsFailed, c->id, peer_of(c->fd) + ": " + why});
  if (c->tls) {
    c->tls->take_output(&c->wire);  // the alert that tells the client why
    send_last(c->fd, c->wire);
    c->tls.reset();  // no close_notify after a failure
  }
  c->wire.clear();
  destroy(c, true);
}

void HttpIo::shut_write(Connection* c) {
  if (c->tls) {
    c->tls->close_notify();
    c->tls->take_output(&c->wire);
    send_last(c->fd, c->wire);
    c->wire.clear();
  }
  ::shutdown(c->fd, SHUT_WR);
}

void HttpIo::process_input(Connection* c) {
  if (c->receiving) return;  // the request received in place comes first
  // When the partial request at the front began arriving (the limits' sweep times it).
  uint64_t partial_since = c->partial_since_ns;
  if (taking_ && c->owed.size() < kHttpMaxPipeline && !c->in.empty()) {
    taken_.clear();
    const uint64_t now = monotonic_ns();
    TakingIds ids(*this);
    size_t consumed =
        lane_.take_http(reinterpret_cast<const uint8_t*>(c->in.data()), c->in.size(), max_body_,
                        now, &taken_, kHttpMaxPipeline - c->owed.size(), true);
    for (HttpLane::Taken& t : taken_) owe(c, t, now);
    c->in.erase(0, consumed);
    if (consumed != 0) {  // what is left is another request
      partial_since = 0;
      c->collect_whole = false;
    }
    update_waiting(c);
    if (c->closing) c->in.clear();
  }
  c->partial_since_ns = 0;
  if (!c->in.empty()) {
    // A plain request may be on its way: its head not all there yet (a head is short),
    // or its head there (within the body limit) and its body coming: collected here,
    // large tensors too, so that its answer is written here from the response block.
    ScannedRequest scanned;
    const bool partial =
        scan_request(c->in.data(), c->in.size(), max_body_, &scanned) == ScanResult::kIncomplete &&
        (scanned.total != 0 || c->in.size() < kMaxLanePartial);
    if (taking_ && partial && begin_receiving(c, scanned)) {
      c->partial_since_ns = partial_since != 0 ? partial_since : c->last_read_ns;
    } else if (taking_ && partial) {
      // The next reads complete it, into one buffer of its size once the client has
      // sent enough of it (a client cannot make the server allocate by announcing a body
      // it does not send).
      if (scanned.total > c->in.capacity() &&
          (scanned.total <= kReserveAtOnce || c->in.size() >= scanned.total / 4)) {
        c->in.reserve(scanned.total);
      }
      c->partial_since_ns = partial_since != 0 ? partial_since : c->last_read_ns;
    } else if (c->owed.empty()) {
      to_python(c);  // the rest is Python's: the protocol gets it, and the connection
    }
    // Else the bytes wait (unread further) until the owed answers are out.
  }
  update_events(c);
}

void HttpIo::owe(Connection* c, HttpLane::Taken& t, uint64_t now) {
  c->owed.emplace_back();
  Owed& slot = c->owed.back();
  slot.request_id = t.request_id;
  slot.connection = t.connection;
  // The connection closes once this is answered: nothing after it is read.
  if (closes(t.connection)) c->closing = true;
  if (t.request_id == 0) {  // refused, or a response cache hit: answered now
    slot.ready = true;
    slot.answer = std::move(t.reply);
    set_connection(&slot.answer, 0, t.connection);
    if (t.batch_size) {
      ++cached_;
    } else {
      ++refused_;
    }
    touch(c);
    return;
  }
  spare_requests_.insert(requests_, t.request_id) = Request{c, &slot, t.model, t.batch_size, now};
  ++queued_;
  tensor_bytes_.in_copied += t.tensor_bytes;
  count_open(c);
}

bool HttpIo::begin_receiving(Connection* c, const ScannedRequest& scanned) {
  if (c->collect_whole || c->tls || c->endpoint || c->owed.size() >= kHttpMaxPipeline) {
    return false;
  }
  // A client cannot make the server hold arena room by announcing a body it does not
  // send: as a buffer of its size (kReserveAtOnce), and a quarter of the arena at most.
  if (scanned.total > kReserveAtOnce && c->in.size() < scanned.total / 4) return false;
  if (receiving_bytes_ + scanned.body_size > core_.arena().size() / 4) return false;
  auto receiving = std::make_unique<HttpLane::Receiving>();
  {
    TakingIds ids(*this);
    if (!lane_.begin_http(reinterpret_cast<const uint8_t*>(c->in.data()), c->in.size(), max_body_,
                          monotonic_ns(), true, receiving.get())) {
      // Its inference header there, it is collected whole (not looked at again).
      c->collect_whole = c->in.size() >= scanned.body_offset + scanned.header_length;
      return false;
    }
  }
  // The tensor bytes already read go to their places: the one copy of those.
  for (const HttpLane::Receiving::Piece& piece : receiving->pieces) {
    if (piece.at >= c->in.size()) break;
    const size_t n = std::min<size_t>(piece.size, c->in.size() - piece.at);
    std::memcpy(piece.to, c->in.data() + piece.at, n);
    tensor_bytes_.in_copied += n;
  }
  c->receive_at = c->in.size();
  receiving_bytes_ += scanned.body_size;
  receiving->placed_bytes = scanned.body_size;
  c->receiving = std::move(receiving);
  c->in.clear();
  return true;
}

void HttpIo::receive_in_place(Connection* c) {
  HttpLane::Receiving& r = *c->receiving;
  // The pieces not yet filled, in order; then the read buffer for what follows, when
  // every piece left is in the list (else the next read continues them).
  iovec parts[64];
  constexpr size_t kMaxParts = sizeof parts / sizeof parts[0];
  size_t n = 0;
  bool all = true;
  for (const HttpLane::Receiving::Piece& piece : r.pieces) {
    if (piece.at + piece.size <= c->receive_at) continue;
    if (n == kMaxParts - 1) {
      all = false;
      break;
    }
    const size_t skip = c->receive_at > piece.at ? c->receive_at - piece.at : 0;
    parts[n++] = {piece.to + skip, static_cast<size_t>(piece.size - skip)};
  }
  if (all) parts[n++] = {&read_buffer_[0], kHeadReadSize};
  ssize_t got;
  do {
    got = ::readv(c->fd, parts, static_cast<int>(n));
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    destroy(c, true);  // reset by the peer
    return;
  }
  if (got == 0) {
    // The client half-closed mid-body: the request is dropped with the connection, as
    // a partial request is (on_readable), once what it owes is answered.
    abandon_receiving(c);
    c->partial_since_ns = 0;
    on_end_of_stream(c);
    return;
  }
  c->last_read_ns = monotonic_ns();
  const size_t left = r.total - c->receive_at;
  const size_t in_place = std::min(static_cast<size_t>(got), left);
  c->receive_at += in_place;
  tensor_bytes_.in_in_place += in_place;
  if (in_place < left) return;
  // All in: queued and owed as any taken request; or, the core refusing it, the
  // request whole in `in`, taken as a request received whole (the general path's).
  HttpLane::Taken taken;
  std::string whole;
  const bool queued = lane_.finish_http(r, &taken, &whole);
  receiving_bytes_ -= r.placed_bytes;
  c->receiving.reset();
  c->partial_since_ns = 0;
  if (!queued) {
    c->in = std::move(whole);
    c->collect_whole = true;
    c->in.append(read_buffer_.data(), static_cast<size_t>(got) - in_place);
    process_input(c);
    return;
  }
  owe(c, taken, c->last_read_ns);
  update_waiting(c);
  if (c->closing) {  // nothing after a closing request is read
    update_events(c);
    return;
  }
  if (static_cast<size_t>(got) > in_place) {
    c->in.append(read_buffer_.data(), static_cast<size_t>(got) - in_place);
    process_input(c);
    return;
  }
  update_events(c);
}

void HttpIo::abandon_receiving(Connection* c) {
  if (!c->receiving) return;
  lane_.abandon_http(*c->receiving);
  receiving_bytes_ -= c->receiving->placed_bytes;
  c->receiving.reset();
}

void HttpIo::touch(Connection* c) {
  if (std::find(touched_.begin(), touched_.end(), c) == touched_.end()) touched_.push_back(c);
}

void HttpIo::collect_due(Connection* c) {
  if (c->h2) {
    grpc_collect(c);
    return;
  }
  size_t before = c->owed.size();
  while (!c->owed.empty() && c->owed.front().ready) {
    c->views.append(std::move(c->owed.front().views), c->out.size());
    c->out += c->owed.front().answer;
    c->owed.pop_front();
  }
  update_waiting(c);
  if (c->owed.size() != before && !c->python && !c->in.empty() && c->partial_since_ns == 0) {
    process_input(c);  // bytes that waited for room (or for the owed answers)
  }
}

void HttpIo::flush_writes() {
  // process_input() may touch connections while this walks: by index.
  for (size_t i = 0; i < touched_.size(); ++i) {
    Connection* c = touched_[i];
    collect_due(c);
    send_out(c);  // may destroy c, which takes it out of touched_
    if (i < touched_.size() && touched_[i] != c) --i;
    core_.dispatch_due();
  }
  touched_.clear();
}

size_t HttpIo::ready_to_send(Connection* c) {
  if (!c->endpoint) return c->out.size();
  c->out_ready = c->endpoint->answers(&c->out, std::min(c->out_ready, c->out.size()));
  return c->out_ready;
}

bool HttpIo::send_out(Connection* c) {
  size_t ready = ready_to_send(c);
  if (c->tls) {
    // The plaintext becomes records as it goes out (once the handshake is done); the
    // records wait in `wire` for the socket.
    if (c->tls->established() && ready != 0) {
      if (!c->tls->send(c->out.data(), ready)) {
        tls_failed(c, c->tls->error());
        return false;
      }
      c->out.erase(0, ready);
    }
    c->tls->take_output(&c->wire);
    ready = c->wire.size();
  }
  if (!c->views.empty()) {  // plaintext, no endpoint: `ready` is all of `out`
    const int failed = send_spliced(c->fd, &c->out, &c->views);
    if (failed != 0) {
      destroy(c, true);  // the peer is gone: nothing more reaches it
      return false;
    }
    ready = 0;
  }
  std::string& bytes = c->tls ? c->wire : c->out;
  while (ready != 0) {
    ssize_t sent = ::send(c->fd, bytes.data(), ready, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      destroy(c, true);  // the peer is gone: nothing more reaches it
      return false;
    }
    bytes.erase(0, static_cast<size_t>(sent));
    ready -= static_cast<size_t>(sent);
    if (c->endpoint) c->out_ready = ready;  // endpoints are plaintext: `bytes` is `out`
  }
  if (c->python && !c->h2) {
    if (!c->write_paused && unsent_of(c) > kHighWater) {
      c->write_paused = true;
      python_event(c, Event{EventKind::kPauseWriting, c->id, {}});
    } else if (c->write_paused && unsent_of(c) <= kLowWater) {
      c->write_paused = false;
      python_event(c, Event{EventKind::kResumeWriting, c->id, {}});
    }
  }
  if (unsent_of(c) == 0) {
    if (c->shut_after) {
      c->shut_after = false;
      shut_write(c);
    }
    if (c->closing && c->owed.empty()) {
      destroy(c, true);
      return false;
    }
  }
  update_events(c);
  return true;
}

bool HttpIo::answer_completion(const Completion& done, std::vector<Answered>* answered,
                               const Share* share) {
  if (done.status != kCompletionOk || done.request_ids.empty() || done.result_offset == 0) {
    return false;
  }
  const Request* first = nullptr;
  for (uint64_t id : done.request_ids) {
    auto found = requests_.find(id);
    if (found == requests_.end()) {
      if (share == nullptr) return false;  // not all this loop's: Python's
      continue;                            // another loop's
    }
    if (first == nullptr) first = &found->second;
  }
  if (first == nullptr) return false;
  Arena& arena = core_.arena();
  if (done.result_offset > arena.size() || done.result_size > arena.size() - done.result_offset) {
    return false;
  }
  const uint8_t* block = arena.base() + done.result_offset;
  Answered stats;
  stats.lane_model = first->lane_model;
  stats.instance_id = done.instance_id;
  stats.execution = share == nullptr || share->counting == index_;
  answers_.clear();
  const uint64_t end_ns = monotonic_ns();
  if (!lane_.codec().complete(block, done.result_size, done.request_ids, done.dispatch_ns, end_ns,
                              &answers_, stats.timings)) {
    return false;  // Python fails the batch (its complete() reads the block the same)
  }
  const HttpResponseWriter& writer = lane_.writer();
  // Held while views of the block wait to be sent (block_views.h): then freed by them.
  std::shared_ptr<HeldBlock> hold;
  // Whether an answer to `to` with `tensors` bytes of them goes from the block (then
  // held): not one several loops answer from, nor through TLS, a page at least, and
  // while a quarter of the arena is not held already (slow readers).
  auto held = [&](const Connection* to, uint64_t tensors) {
    if (share != nullptr || to->tls || tensors < kMinBlockView) return false;
    if (!hold) {
      if (held_bytes_ + done.result_size > arena.size() / 4) return false;
      hold = std::make_shared<HeldBlock>(arena, done.result_offset, done.result_size, &held_bytes_);
    }
    return true;
  };
  stats.batch_sizes.reserve(answers_.size());
  for (KServeCodec::Answer& answer : answers_) {
    const uint64_t id = answer.response.request_id;
    auto found = requests_.find(id);
    if (found == requests_.end()) continue;
    Request request = found->second;
    spare_requests_.erase(requests_, found, [](Request&) {});
    if (answer.counted_failure) {
      stats.failed_ns.push_back(answer.request_ns);
    } else {
      ++stats.successes;
      stats.inferences += answer.batch_size;
      stats.request_ns += answer.request_ns;
      stats.queue_ns += answer.queue_ns;
      if (each_) stats.each.emplace_back(answer.request_ns, answer.queue_ns);
    }
    stats.batch_sizes.push_back(request.batch_size);
    Connection* c = request.connection;
    if (request.stream != 0) {     // a gRPC call
      if (c == nullptr) continue;  // its client went away
      const bool viewed = held(c, raw_output_bytes(answer.response));
      grpc_answer(c, request.stream, answer.response, viewed ? hold : nullptr);
      lane_.codec().give_back(answer.response);
      continue;
    }
    const ResponseEncoding coding = lane_.take_encoding(id);
    if (c == nullptr) continue;  // its client went away
    // First in line (a client with one request at a time: the usual case), the answer
    // is written straight after the bytes owed before it; else it waits in its slot.
    const bool first_in_line = request.slot == &c->owed.front();
    std::string& http = first_in_line ? c->out : request.slot->answer;
    OutViews& views = first_in_line ? c->views : request.slot->views;
    const size_t at = http.size();
    const size_t head = writer.head_size(answer.response, coding);
    const uint64_t tensors = raw_output_bytes(answer.response);
    if (head != 0 && !c->endpoint && held(c, tensors)) {
      http.resize(at + head);
      writer.write_head(answer.response, &http[at]);
      set_connection(&http, at, request.slot->connection);  // before the views' offsets
      for (const ResponseOutput& output : answer.response.outputs) {
        if (!output.json && !output.in_shm) views.add(http.size(), output.data, output.size, hold);
      }
      tensor_bytes_.out_in_place += tensors;
    } else {
      http.resize(at + writer.size(answer.response, coding));
      writer.write(answer.response, coding, &http[at]);
      set_connection(&http, at, request.slot->connection);
      tensor_bytes_.out_copied += tensors;
    }
    lane_.codec().give_back(answer.response);
    request.slot->ready = true;
    touch(c);
  }
  // The answers are made: the requests end here, as Triton's after ResponseSend.
  const uint64_t late = extend_to_answered(end_ns, monotonic_ns(), stats.timings);
  stats.request_ns += late * stats.successes;
  for (uint64_t& took : stats.failed_ns) took += late;
  for (auto& one : stats.each) one.first += late;
  // A request whose final response is in the block is answered now; one without gets
  // it in a later block (it stays owed).
  ResponseBlockView view;
  if (view_response_block(block, done.result_size, &view)) {
    for (uint32_t r = 0; r < view.header->n_responses; ++r) {
      if (!(view.records[r].flags & kResponseFinal)) continue;
      const uint32_t index = view.records[r].request_index;
      if (index >= done.request_ids.size()) continue;
      if (requests_.count(done.request_ids[index])) stats.lost.push_back(done.request_ids[index]);
    }
  }
  // Else the Share's last owner frees it, or the views' hold once they are sent.
  if (share == nullptr && !hold) arena.free(done.result_offset);
  answered->push_back(std::move(stats));
  return true;
}

void HttpIo::write(uint64_t connection, const char* data, size_t size) {
  Connection* c = find(connection);
  if (c == nullptr || c->closing) return;
  const bool idle = unsent_of(c) == 0;
  c->out.append(data, size);
  if (idle) {
    send_out(c);
  } else {
    update_events(c);
  }
}

bool HttpIo::close(uint64_t connection, bool abort) {
  Connection* c = find(connection);
  if (c == nullptr) return false;
  if (abort || unsent_of(c) == 0) {
    destroy(c, false);
    return true;
  }
  c->closing = true;
  update_events(c);
  return false;
}

void HttpIo::write_eof(uint64_t connection) {
  Connection* c = find(connection);
  if (c == nullptr) return;
  if (unsent_of(c) == 0) {
    shut_write(c);
  } else {
    c->shut_after = true;
  }
}

void HttpIo::pause_reading(uint64_t connection) {
  Connection* c = find(connection);
  if (c == nullptr) return;
  c->py_paused = true;
  update_events(c);
}

void HttpIo::resume_reading(uint64_t connection) {
  Connection* c = find(connection);
  if (c == nullptr) return;
  c->py_paused = false;
  update_events(c);
}

size_t HttpIo::unsent(uint64_t connection) const {
  Connection* c = find(connection);
  return c == nullptr ? 0 : unsent_of(c);
}

bool HttpIo::in_lane_mode(uint64_t connection) const {
  Connection* c = find(connection);
  return c != nullptr && !c->python;
}

void HttpIo::take_back(uint64_t connection, const char* data, size_t size, Turn* turn) {
  Connection* c = find(connection);
  if (c != nullptr && !c->eof && !c->closing) {
    if (c->python) {
      c->python = false;
      c->py_paused = false;
      c->write_paused = false;
      c->in.assign(data, size);
    } else {
      // Taken back already by an earlier event of the same turn: the connection's
      // reads were all Python's then (a request whose head and body came in two
      // reads), and these bytes follow those.
      c->in.append(data, size);
    }
    process_input(c);
    flush_writes();  // answers given at once (cache hits, refusals)
  }
  hand_events(turn);
}

bool HttpIo::owned(uint64_t request_id, Owned* out) const {
  auto found = requests_.find(request_id);
  if (found == requests_.end()) return false;
  out->lane_model = found->second.lane_model;
  out->batch_size = found->second.batch_size;
  out->submit_ns = found->second.submit_ns;
  const Connection* c = found->second.connection;
  out->connection = found->second.stream != 0 && c != nullptr ? c->id : 0;
  out->stream = found->second.stream;
  return true;
}

bool HttpIo::answer(uint64_t request_id, const char* http, size_t size) {
  auto found = requests_.find(request_id);
  if (found == requests_.end() || found->second.stream != 0) return false;
  Request request = found->second;
  spare_requests_.erase(requests_, found, [](Request&) {});
  if (request.connection == nullptr) return false;  // its client went away
  request.slot->answer.assign(http, size);
  request.slot->ready = true;
  touch(request.connection);
  return true;
}

void HttpIo::destroy(Connection* c, bool report) {
  // A TLS session that sent all it had ends with close_notify (a truncation otherwise).
  if (c->tls && c->tls->established() && unsent_of(c) == 0) {
    c->tls->close_notify();
    c->tls->take_output(&c->wire);
    send_last(c->fd, c->wire);
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  abandon_receiving(c);
  for (Owed& slot : c->owed) {
    if (slot.ready || slot.request_id == 0) continue;
    // Its client went away: a queued request is dropped, a running one flagged. It stays
    // this loop's until its completion, which the statistics count (with no one to
    // answer: CANCELED when it was dropped).
    auto found = requests_.find(slot.request_id);
    if (found != requests_.end()) {
      found->second.connection = nullptr;
      found->second.slot = nullptr;
    }
    core_.cancel(slot.request_id);
  }
  c->owed.clear();
  for (auto& held : c->calls) {
    deadlines_->remove(held.second.deadline);
    const uint64_t request_id = held.second.request_id;
    if (request_id == 0) continue;
    auto found = requests_.find(request_id);  // as an HTTP request above
    if (found != requests_.end()) found->second.connection = nullptr;
    core_.cancel(request_id);
  }
  c->calls.clear();
  c->grpc_in_flight = 0;
  update_waiting(c);
  if (c->counted) {
    --counted_;
    publish_counts();
  }
  touched_.erase(std::remove(touched_.begin(), touched_.end(), c), touched_.end());
  const uint64_t id = c->id;
  // A relaying loop's connections are unknown to Python.
  if (report && relay_ == nullptr) events_.push_back(Event{EventKind::kClosed, id, {}});
  connections_.erase(id);
}

void HttpIo::close_all() {
  while (!connections_.empty()) destroy(connections_.begin()->second.get(), false);
}

void HttpIo::sweep(uint64_t before_ns, uint64_t idle_before_ns, std::vector<uint64_t>* timed_out,
                   std::vector<uint64_t>* idle) {
  for (auto& entry : connections_) {
    Connection* c = entry.second.get();
    if (c->python || c->closing) continue;
    if (c->partial_since_ns != 0) {
      if (c->partial_since_ns < before_ns && c->owed.empty()) timed_out->push_back(c->id);
      continue;
    }
    if (!c->owed.empty() || !c->in.empty() || unsent_of(c) != 0) continue;
    const bool silent = !c->received && c->last_read_ns < before_ns;
    if (silent || (idle_before_ns && c->last_read_ns < idle_before_ns)) idle->push_back(c->id);
  }
}

void HttpIo::hand_over(uint64_t connection) {
  Connection* c = find(connection);
  if (c == nullptr || c->python || !c->owed.empty()) return;
  if (c->receiving) {
    // Python's protocol times the partial request out: its head is all it needs.
    c->in = std::move(c->receiving->head);
    abandon_receiving(c);
  }
  c->partial_since_ns = 0;
  to_python(c);
  update_events(c);
}

void HttpIo::to_python(Connection* c) {
  c->python = true;
  c->collect_whole = false;
  python_event(c, Event{EventKind::kHandOver, c->id, std::move(c->in)});
  c->in.clear();
}

}  // namespace naiad
