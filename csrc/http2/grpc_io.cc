// The gRPC side of the I/O loop (http1/http_io.h): gRPC connections in the same epoll
// set as the HTTP/1.1 ones. Each socket's bytes go to its h2::GrpcConnection; a
// ModelInfer call whose message the gRPC lane takes is submitted here and answered from
// its completion (GrpcResponseWriter::parts, send_message, finish), with no Python per
// call. Every other call's events go to Python (kGrpcCall), which answers through
// grpc(); a held call the lane does not take (a version served but not by the lane...)
// goes to Python whole, its opening and message first.
//
// A compressed message is inflated here (grpc_inflate.h): its first step at once (a
// small message is done), then a step per turn for the first of those not done: a bomb
// costs each turn one step, and the loop holds one bomb's worth at a time. Inflating here rather
// than on a worker thread keeps the call, its message and the answer on the thread that owns the
// connection, with no hand-off and no lock, and costs a small message nothing more.
//
// A held call's grpc-timeout is a deadline in the loop's DeadlineTimer (deadline_timer.h),
// whose timerfd wakes the loop when one passes (grpc_expire). Keepalive PINGs, the maximum
// connection age and the ping policy are per-connection timers of seconds to hours, kept by
// Python's handler (grpc/protocol.py) through grpc(): they cost nothing per call and need no timer
// plumbing in the epoll set.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string_view>

#include "codec/error_status.h"
#include "http1/http_io.h"
#include "http2/grpc_wire.h"

namespace naiad {

namespace {

constexpr std::string_view kModelInfer = "/inference.GRPCInferenceService/ModelInfer";
// What grpc++ (and so Triton 2.51) answers a call whose deadline passed.
constexpr char kDeadlineMessage[] = "Deadline Exceeded";

}  // namespace

void HttpIo::listen_grpc(int listen_fd, GrpcLane& lane, const h2::Limits& limits) {
  grpc_listen_fd_ = listen_fd;
  grpc_lane_ = &lane;
  grpc_limits_ = limits;
  if (inflate_fd_ < 0) {
    inflate_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event readable{};
    readable.events = EPOLLIN;
    readable.data.u64 = kInflateKey;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, inflate_fd_, &readable);
    deadlines_ = std::make_unique<DeadlineTimer>();
    readable.data.u64 = kDeadlineKey;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, deadlines_->fd(), &readable);
  }
  if (listen_fd < 0) return;  // served for the connections other loops hand over
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kGrpcListenerKey;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd, &event);
}

void HttpIo::stop_listening_grpc() {
  if (grpc_listen_fd_ < 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, grpc_listen_fd_, nullptr);
  grpc_listen_fd_ = -1;
}

void HttpIo::grpc_accepted(Connection* c) {
  c->python = true;  // its Python handler knows it (kClosed is reported)
  c->h2 = std::make_unique<h2::GrpcConnection>(grpc_limits_);
  if (relay_ == nullptr) events_.push_back(Event(EventKind::kGrpcAccepted, c->id));
  touch(c);  // the server preface (our SETTINGS)
}

void HttpIo::grpc_received(Connection* c, const char* data, size_t size) {
  std::vector<h2::Event> events;
  c->h2->receive(data, size, &events);
  c->activity += events.size();
  if (grpc_watch_pings_) grpc_pings(c);
  for (h2::Event& event : events) grpc_event(c, event);
  touch(c);  // what the protocol wrote back (SETTINGS ACK, WINDOW_UPDATE, answers)
}

void HttpIo::grpc_pings(Connection* c) {
  const uint64_t received = c->h2->pings_received();
  if (received == c->pings_seen) return;
  c->pings_seen = received;
  Event event(EventKind::kGrpcPings, c->id);
  event.count = received;
  event.flag = c->answered;
  c->answered = false;
  python_event(c, std::move(event));
}

void HttpIo::grpc_event(Connection* c, h2::Event& event) {
  auto held = c->calls.find(event.stream_id);
  if (held == c->calls.end()) {
    const bool take = event.kind == h2::EventKind::kCall && grpc_taking_ && !c->moving &&
                      event.path == kModelInfer;
    if (take && !grpc_admits(event)) {
      ++refused_;
      c->h2->finish(event.stream_id, grpc::kUnavailable, grpc_rule_.denial);
      touch(c);
      return;
    }
    if (take) {
      GrpcCall& call = c->calls[event.stream_id];
      const uint64_t deadline = event.timeout_us < 0
                                    ? UINT64_MAX
                                    : DeadlineTimer::deadline_of(monotonic_ns(), event.timeout_us);
      if (deadline != UINT64_MAX)
        call.deadline = deadlines_->add(deadline, {c->id, event.stream_id});
      call.opened = std::move(event);
      return;
    }
    python_event(c, Event::call(c->id, std::move(event)));
    return;
  }
  GrpcCall& call = held->second;
  switch (event.kind) {
    case h2::EventKind::kMessage:
      if (call.request_id != 0 || call.has_message) {
        grpc_to_python(c, event.stream_id, &event);  // Python refuses a second message
        return;
      }
      call.has_message = true;
      if (!event.compressed) {
        call.message = std::move(event.message);
        return;
      }
      call.inflation = std::make_unique<grpc::Inflation>(
          std::move(event.message), call.opened.encoding, grpc_limits_.max_message_size);
      if (!grpc_inflate_step(c, event.stream_id, call)) {
        if (inflating_.empty()) {
          const uint64_t one = 1;
          [[maybe_unused]] ssize_t wrote = ::write(inflate_fd_, &one, sizeof one);
        }
        inflating_.emplace_back(c->id, event.stream_id);
      }
      return;
    case h2::EventKind::kHalfClose:
      if (call.request_id != 0) return;
      if (!call.has_message) {
        grpc_to_python(c, event.stream_id, &event);  // Python's error: no message
        return;
      }
      if (call.inflation && !call.inflation->done()) {
        call.half_closed = true;  // submitted once inflated
        return;
      }
      grpc_submit(c, event.stream_id, call);
      return;
    case h2::EventKind::kCancel:
      grpc_cancel(c, event.stream_id, call);  // the client reset the call
      return;
    default:
      return;  // a second kCall on an open stream does not happen
  }
}

bool HttpIo::grpc_admits(const h2::Event& call) const {
  if (grpc_rule_.key.empty()) return true;
  for (const hpack::Header& header : call.metadata) {
    if (header.name == grpc_rule_.key && header.value == grpc_rule_.value) return true;
  }
  return false;
}

void HttpIo::grpc_cancel(Connection* c, uint32_t stream, GrpcCall& call) {
  // A queued request is dropped, a running one flagged; its completion answers nobody.
  if (call.request_id != 0) {
    auto found = requests_.find(call.request_id);
    if (found != requests_.end()) found->second.connection = nullptr;
    core_.cancel(call.request_id);
  }
  grpc_call_done(c, stream);
}

void HttpIo::grpc_expire(uint64_t now_ns) {
  if (!deadlines_) return;
  std::vector<DeadlineTimer::Key> due;
  deadlines_->expire(now_ns, &due);
  for (const DeadlineTimer::Key& key : due) {
    Connection* c = find(key.connection);
    if (c == nullptr) continue;
    auto held = c->calls.find(key.stream);
    if (held == c->calls.end()) continue;
    held->second.deadline = DeadlineTimer::kNone;  // expire() took it out
    c->h2->finish(key.stream, grpc::kDeadlineExceeded, kDeadlineMessage);
    grpc_cancel(c, key.stream, held->second);
  }
}

void HttpIo::grpc_to_python(Connection* c, uint32_t stream, h2::Event* then) {
  auto held = c->calls.find(stream);
  GrpcCall call = std::move(held->second);
  c->calls.erase(held);
  deadlines_->remove(call.deadline);  // Python's timer keeps it (grpc/protocol.py)
  python_event(c, Event::call(c->id, std::move(call.opened)));
  if (call.has_message) {
    h2::Event message;
    message.kind = h2::EventKind::kMessage;
    message.stream_id = stream;
    if (!call.inflation) {
      message.message = std::move(call.message);
    } else if (call.inflation->done()) {
      message.message.assign(call.inflation->message());
    } else {
      message.message = call.inflation->take_compressed();  // Python inflates it
      message.compressed = true;
    }
    python_event(c, Event::call(c->id, std::move(message)));
  }
  if (then != nullptr) python_event(c, Event::call(c->id, std::move(*then)));
}

void HttpIo::grpc_submit(Connection* c, uint32_t stream, GrpcCall& call) {
  if (call.inflation && call.inflation->status() != grpc::kOk) {  // damaged, or too large
    ++refused_;
    c->h2->finish(stream, call.inflation->status(), call.inflation->error());
    grpc_call_done(c, stream);
    return;
  }
  const uint64_t now = monotonic_ns();
  if (call.deadline != DeadlineTimer::kNone && deadlines_->at(call.deadline) <= now) {
    grpc_expire(now);  // past due before it was queued (a grpc-timeout of 0): not run
    return;
  }
  TakingIds ids(*this);
  GrpcLane::Taken taken;
  if (!grpc_lane_->submit(grpc_message_of(call), now, &taken)) {
    grpc_to_python(c, stream, nullptr);
    // The half-close that made it due follows the message.
    h2::Event half;
    half.kind = h2::EventKind::kHalfClose;
    half.stream_id = stream;
    python_event(c, Event::call(c->id, std::move(half)));
    return;
  }
  call.message.clear();
  call.message.shrink_to_fit();
  call.inflation.reset();
  call.model = taken.model;
  call.classify = std::move(taken.classify);
  if (taken.request_id == 0) {
    if (taken.cached.entry) {
      ++cached_;
      grpc_answer(c, stream, taken.cached.response, nullptr);
    } else {
      ++refused_;
      c->h2->finish(stream, error_status_of(taken.error_kind).grpc_code, taken.error);
      grpc_call_done(c, stream);
    }
    return;
  }
  call.request_id = taken.request_id;
  Request& request = spare_requests_.insert(requests_, taken.request_id);
  request = Request{c, nullptr, taken.model, taken.batch_size, now, stream};
  ++queued_;
  ++c->grpc_in_flight;
  c->grpc_high = std::max(c->grpc_high, c->grpc_in_flight);
  count_open(c);
  update_waiting(c);
}

void HttpIo::grpc_answer(Connection* c, uint32_t stream, const InferResponse& answer,
                         const std::shared_ptr<HeldBlock>& block) {
  const InferResponse* chosen = &answer;
  InferResponse classified;
  std::deque<Classification> kept;
  auto held = c->calls.find(stream);
  if (held != c->calls.end() && !held->second.classify.empty() &&
      answer.error == ErrorKind::kNone) {
    classified = answer;
    std::string error;
    if (!grpc_lane_->classify(held->second.model, held->second.classify, &classified, &kept,
                              &error)) {
      c->h2->finish(stream, grpc::kInvalidArgument, error);
      grpc_call_done(c, stream);
      return;
    }
    chosen = &classified;
  }
  const InferResponse& response = *chosen;
  if (response.error == ErrorKind::kNone) {
    grpc_scratch_.clear();
    grpc_parts_.clear();
    grpc_writer_.parts(response, false, &grpc_scratch_, &grpc_parts_);
    const uint64_t viewed = c->h2->viewed_out();
    c->h2->send_message(stream, grpc_parts_.data(), grpc_parts_.size(), block);
    const uint64_t in_place = c->h2->viewed_out() - viewed;
    tensor_bytes_.out_in_place += in_place;
    tensor_bytes_.out_copied += raw_output_bytes(response) - in_place;
    c->h2->finish(stream, grpc::kOk, {});
  } else {
    c->h2->finish(stream, error_status_of(response.error).grpc_code, grpc_error_message(response));
  }
  grpc_call_done(c, stream);
}

bool HttpIo::grpc_inflate_step(Connection* c, uint32_t stream, GrpcCall& call) {
  if (!call.inflation->step()) return false;
  if (call.half_closed) grpc_submit(c, stream, call);
  return true;
}

void HttpIo::grpc_inflate_turn() {
  while (!inflating_.empty()) {
    const auto [id, stream] = inflating_.front();
    Connection* c = find(id);
    GrpcCall* call = nullptr;
    if (c != nullptr) {
      auto held = c->calls.find(stream);
      if (held != c->calls.end()) call = &held->second;
    }
    // Gone meanwhile: closed, reset, or handed to Python.
    if (call == nullptr || !call->inflation || call->inflation->done()) {
      inflating_.pop_front();
      continue;
    }
    if (!grpc_inflate_step(c, stream, *call)) return;  // on at the next turn
    inflating_.pop_front();
    touch(c);
    if (!inflating_.empty()) return;
  }
  uint64_t count;
  [[maybe_unused]] ssize_t got = ::read(inflate_fd_, &count, sizeof count);
}

void HttpIo::grpc_call_done(Connection* c, uint32_t stream) {
  auto held = c->calls.find(stream);
  if (held == c->calls.end()) return;
  if (held->second.request_id != 0) --c->grpc_in_flight;
  deadlines_->remove(held->second.deadline);
  c->calls.erase(held);
  c->answered = true;
  ++c->activity;
  update_waiting(c);
  touch(c);
}

void HttpIo::grpc_collect(Connection* c) {
  if (c->h2->has_output()) c->h2->take_output(&c->out, &c->views);
  if (!c->closing && (c->h2->closed() || c->h2->done())) c->closing = true;
}

h2::GrpcConnection* HttpIo::grpc(uint64_t connection) const {
  Connection* c = find(connection);
  return c == nullptr || c->closing ? nullptr : c->h2.get();
}

void HttpIo::grpc_wrote(uint64_t connection) {
  Connection* c = find(connection);
  if (c != nullptr && c->h2) touch(c);
}

uint64_t HttpIo::grpc_activity(uint64_t connection) const {
  Connection* c = find(connection);
  return c == nullptr ? 0 : c->activity;
}

bool HttpIo::release_grpc(uint64_t request_id) {
  auto found = requests_.find(request_id);
  if (found == requests_.end() || found->second.stream == 0) return false;
  Request request = found->second;
  spare_requests_.erase(requests_, found, [](Request&) {});
  if (request.connection != nullptr) {
    // Python answers it on the stream: the call is no longer this loop's.
    auto held = request.connection->calls.find(request.stream);
    if (held != request.connection->calls.end()) {
      --request.connection->grpc_in_flight;
      deadlines_->remove(held->second.deadline);
      request.connection->calls.erase(held);
      update_waiting(request.connection);
    }
  }
  return true;
}

}  // namespace naiad
