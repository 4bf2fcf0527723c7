// The open Sends of a pipelining sink (keyed_sends.hpp).
#include "sinks/keyed_sends.hpp"

#include <algorithm>
#include <string_view>
#include <utility>

namespace outbox {

uint64_t KeyedSends::Open(const OutMessage *messages, size_t n, Delivery *out,
                          Clock::time_point send_until, bool alone) {
  const uint64_t ticket = last_ticket_ + 1;
  // Built in place: the copies' views point into its own buffers.
  OpenSend &send = sends_[ticket];
  try {
    send.out = out;
    send.send_until = send_until;
    send.alone = alone;
    Copy(messages, n, &send);
    Slot slot;
    slot.alone = alone;
    send.slots.assign(n, slot);
    Chain(&send);
  } catch (...) {
    sends_.erase(ticket);
    throw;
  }
  last_ticket_ = ticket;
  return ticket;
}

// One buffer for every byte the views need, reserved first so that no
// append moves it: the copies' views point into it for the Send's life.
void KeyedSends::Copy(const OutMessage *messages, size_t n, OpenSend *send) {
  size_t bytes = 0;
  size_t headers = 0;
  for (size_t i = 0; i < n; ++i) {
    const OutMessage &m = messages[i];
    bytes += m.id.size() + m.topic.size() + m.target.size() + m.key.size() + m.payload.size() +
             m.headers_json.size() + m.source.size();
    for (size_t h = 0; h < m.header_count; ++h) {
      bytes += m.headers[h].name.size() + m.headers[h].value.size();
    }
    headers += m.header_count;
  }
  send->bytes.reserve(bytes);
  send->headers.reserve(headers);
  send->messages.reserve(n);
  auto keep = [send](std::string_view v) {
    const size_t at = send->bytes.size();
    send->bytes.append(v.data() != nullptr ? v.data() : "", v.size());
    return std::string_view(send->bytes.data() + at, v.size());
  };
  for (size_t i = 0; i < n; ++i) {
    OutMessage m = messages[i];
    m.id = keep(m.id);
    m.topic = keep(m.topic);
    m.target = keep(m.target);
    m.key = keep(m.key);
    m.payload = keep(m.payload);
    m.headers_json = keep(m.headers_json);
    m.source = keep(m.source);
    const size_t first = send->headers.size();
    for (size_t h = 0; h < m.header_count; ++h) {
      send->headers.push_back(Header{keep(m.headers[h].name), keep(m.headers[h].value)});
    }
    m.headers = m.header_count > 0 ? send->headers.data() + first : nullptr;
    send->messages.push_back(m);
  }
}

void KeyedSends::Chain(OpenSend *send) {
  std::map<ChainKey, size_t> last;
  for (size_t i = 0; i < send->messages.size(); ++i) {
    const OutMessage &m = send->messages[i];
    if (!m.has_key) {
      send->ready.push_back(i);
      continue;
    }
    auto [it, first] = last.try_emplace(ChainOf(m), i);
    if (first) {
      send->ready.push_back(i);
    } else {
      send->slots[it->second].next = i;
      it->second = i;
    }
  }
}

KeyedSends::OpenSend *KeyedSends::Find(uint64_t ticket) {
  const auto it = sends_.find(ticket);
  return it == sends_.end() ? nullptr : &it->second;
}

const KeyedSends::OpenSend *KeyedSends::Find(uint64_t ticket) const {
  const auto it = sends_.find(ticket);
  return it == sends_.end() ? nullptr : &it->second;
}

bool KeyedSends::Done(uint64_t ticket) const {
  const OpenSend *send = Find(ticket);
  return send == nullptr || send->settled == send->slots.size();
}

bool KeyedSends::HasOutstanding() const {
  return std::any_of(sends_.begin(), sends_.end(), [](const auto &entry) {
    return entry.second.settled < entry.second.slots.size();
  });
}

void KeyedSends::Land(Slot *slot) noexcept {
  if (slot->bound) {
    by_wire_.erase(slot->wire_id);
    slot->bound = false;
  }
  if (slot->in_flight) {
    slot->in_flight = false;
    --in_flight_;
    if (slot->alone) --alone_in_flight_;
  }
}

void KeyedSends::Close(uint64_t ticket) noexcept {
  OpenSend *send = Find(ticket);
  if (send == nullptr) return;
  for (Slot &slot : send->slots) Land(&slot);
  sends_.erase(ticket);
}

bool KeyedSends::NextReady(SendRef *ref) {
  if (alone_in_flight_ > 0) return false;  // a message sent alone is out: nothing else goes
  for (auto &[ticket, send] : sends_) {
    if (send.alone && send.settled < send.slots.size()) {
      // Its turn comes once what the older Sends have in flight is
      // answered (they go on sending meanwhile: it waits for them, not
      // they for it); the newer ones wait for it.
      if (in_flight_ > 0) return false;
    }
    while (!send.ready.empty()) {
      const size_t i = send.ready.front();
      send.ready.pop_front();
      if (send.slots[i].settled || send.slots[i].in_flight) continue;
      *ref = SendRef{ticket, i};
      return true;
    }
  }
  return false;
}

const OutMessage &KeyedSends::Message(SendRef ref) const {
  return Find(ref.ticket)->messages[ref.index];
}

bool KeyedSends::MarkSent(SendRef ref, uint64_t wire_id, Clock::time_point deadline) {
  OpenSend *send = Find(ref.ticket);
  if (send == nullptr || by_wire_.count(wire_id) != 0) return false;
  flight_order_.push_back(ref);  // first: it may throw, and nothing has changed yet
  by_wire_.emplace(wire_id, ref);
  Slot &slot = send->slots[ref.index];
  slot.wire_id = wire_id;
  slot.bound = true;
  slot.deadline = deadline;
  slot.in_flight = true;
  ++in_flight_;
  if (slot.alone) ++alone_in_flight_;
  return true;
}

bool KeyedSends::FindSent(uint64_t wire_id, SendRef *ref) const {
  const auto it = by_wire_.find(wire_id);
  if (it == by_wire_.end()) return false;
  *ref = it->second;
  return true;
}

void KeyedSends::Unbind(SendRef ref) {
  OpenSend *send = Find(ref.ticket);
  if (send == nullptr) return;
  Slot &slot = send->slots[ref.index];
  if (slot.bound) {
    by_wire_.erase(slot.wire_id);
    slot.bound = false;
  }
}

void KeyedSends::Write(Delivery *d, DeliveryStatus status, const char *error,
                       bool unsent) noexcept {
  d->status = status;
  d->answered_at_us = 0;
  d->connection_lost = false;
  d->unsent = unsent;
  try {
    d->error = error;
  } catch (...) {
    d->error.clear();
  }
}

void KeyedSends::Settle(SendRef ref, DeliveryStatus status, std::string error, bool answered) {
  OpenSend *send = Find(ref.ticket);
  if (send == nullptr || send->slots[ref.index].settled) return;
  Slot &slot = send->slots[ref.index];
  Land(&slot);
  slot.settled = true;
  ++send->settled;
  Delivery &d = send->out[ref.index];
  d.status = status;
  d.error = std::move(error);
  d.answered_at_us = answered ? UnixNowUs() : 0;
  d.connection_lost = false;
  d.unsent = false;
  if (status == DeliveryStatus::kDelivered) {
    if (slot.next != kNone) send->ready.push_back(slot.next);
    return;
  }
  for (size_t j = slot.next; j != kNone; j = send->slots[j].next) {
    Slot &behind = send->slots[j];
    if (behind.settled) continue;
    Land(&behind);
    behind.settled = true;
    ++send->settled;
    Write(&send->out[j], DeliveryStatus::kNotSent, kHeldBack);
  }
}

void KeyedSends::MarkLost(SendRef ref) noexcept {
  OpenSend *send = Find(ref.ticket);
  if (send == nullptr || send->out[ref.index].status != DeliveryStatus::kRetriable) return;
  send->out[ref.index].connection_lost = true;
  marked_lost_ = true;
}

bool KeyedSends::Overdue(Clock::time_point now, SendRef *ref, Clock::time_point *deadline) {
  while (!flight_order_.empty()) {
    const SendRef first = flight_order_.front();
    const OpenSend *send = Find(first.ticket);
    if (send != nullptr && send->slots[first.index].in_flight) {
      const Slot &slot = send->slots[first.index];
      if (slot.deadline > now) return false;
      *ref = first;
      *deadline = slot.deadline;
      return true;
    }
    flight_order_.pop_front();  // answered, or its Send is gone
  }
  return false;
}

int64_t KeyedSends::MsUntilNextDeadline(Clock::time_point now, int64_t cap_ms) {
  Clock::time_point next = now + std::chrono::milliseconds(cap_ms);
  SendRef ref;
  Clock::time_point due;
  if (Overdue(now, &ref, &due)) return 0;
  if (!flight_order_.empty()) {
    // Overdue left the first message still in flight at the front.
    const SendRef first = flight_order_.front();
    next = std::min(next, Find(first.ticket)->slots[first.index].deadline);
  }
  for (const auto &entry : sends_) {
    const OpenSend &send = entry.second;
    if (!send.ready.empty()) next = std::min(next, send.send_until);
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
  return std::clamp<int64_t>(left + (next > now ? 1 : 0), 0, cap_ms);
}

void KeyedSends::CutOff(Clock::time_point now, const std::string &why) {
  for (auto &entry : sends_) {
    OpenSend &send = entry.second;
    if (send.send_until > now || send.settled == send.slots.size()) continue;
    send.ready.clear();
    for (size_t i = 0; i < send.slots.size(); ++i) {
      Slot &slot = send.slots[i];
      if (slot.settled || slot.in_flight) continue;
      slot.settled = true;
      ++send.settled;
      Write(&send.out[i], DeliveryStatus::kNotSent, why.c_str());
    }
  }
}

void KeyedSends::FailOutstanding(const std::string &reason, Loss loss) noexcept {
  try {
    const std::string not_sent = "not sent: " + reason;
    const bool suspect = loss == Loss::kMaybeAMessage;
    // Messages that were on the connection carry the suspicion; those never
    // handed to it wait with them unsuspected (unsent) unless nothing was
    // on it, when they are the only ones the loss may be laid to.
    const bool on_wire = in_flight_ > 0 || marked_lost_;
    marked_lost_ = false;
    for (auto &[ticket, send] : sends_) {
      for (size_t i = 0; i < send.slots.size(); ++i) {
        if (send.slots[i].in_flight) {
          Settle(SendRef{ticket, i}, DeliveryStatus::kRetriable, reason, false);
          send.out[i].connection_lost = suspect;
        }
      }
      while (!send.ready.empty()) {
        const size_t i = send.ready.front();
        send.ready.pop_front();
        if (send.alone) {
          Settle(SendRef{ticket, i}, DeliveryStatus::kNotSent, not_sent, false);
          continue;
        }
        Settle(SendRef{ticket, i}, DeliveryStatus::kRetriable, not_sent, false);
        send.out[i].connection_lost = suspect;
        send.out[i].unsent = suspect && on_wire;
      }
    }
  } catch (...) {
    // Out of memory: whatever is left without an outcome gets it plainly.
  }
  FailAllRest(reason.c_str());
}

size_t KeyedSends::FailRest(OpenSend *send, const char *reason, bool unsent) noexcept {
  size_t was_in_flight = 0;
  send->ready.clear();
  for (size_t i = 0; i < send->slots.size(); ++i) {
    Slot &slot = send->slots[i];
    if (slot.settled) continue;
    if (slot.in_flight) ++was_in_flight;
    Land(&slot);
    slot.settled = true;
    ++send->settled;
    Write(&send->out[i], DeliveryStatus::kRetriable, reason, unsent);
  }
  return was_in_flight;
}

size_t KeyedSends::FailRest(uint64_t ticket, const char *reason) noexcept {
  OpenSend *send = Find(ticket);
  return send == nullptr ? 0 : FailRest(send, reason);
}

size_t KeyedSends::FailAllRest(const char *reason, bool unsent) noexcept {
  size_t was_in_flight = 0;
  for (auto &entry : sends_) was_in_flight += FailRest(&entry.second, reason, unsent);
  return was_in_flight;
}

size_t KeyedSends::AbandonAll(const char *reason) noexcept {
  const size_t was_in_flight = FailAllRest(reason);
  by_wire_.clear();
  flight_order_.clear();
  in_flight_ = 0;
  alone_in_flight_ = 0;
  marked_lost_ = false;
  sends_.clear();
  return was_in_flight;
}

}  // namespace outbox
