// Suspects: events lost with a connection (Delivery::connection_lost). A
// broker may close a connection over one message (MQTT 3.1.1 past its packet
// size, NATS past max_payload, a RabbitMQ channel error): every message in
// flight on it is lost, and nothing says which one was the cause. Charging
// them all would kill innocent events; charging none would let the cause
// come back for good, taking its neighbours down with it each time.
//
// So an event lost with others is sent with others once more (a broker
// restart loses a whole window, which then goes through together); lost so
// twice, it is sent alone from then on, one such event per sink at a time,
// in a group of its own through the pipeline (never waited for outside the
// window, so it holds nothing but its own key), and alone on the sink's
// connections (Sink::SendAlone: it goes once nothing else is in flight, and
// nothing after it until it is answered; a loss beside a fresh culprit
// would otherwise read as its own). Lost alone while the sink
// answers other events, it is the cause: the second such loss in a row, and
// every one after it, counts an attempt (the first is forgiven: a network
// that drops connections now and then loses an event alone too, now and
// then). Through alone, or dead, it is forgotten.
//
// Lost alone while the sink answers nothing else, an event may be the cause
// or the broker may close every connection; only another event going
// through tells the two apart. So since the sink's last answer (or for
// outbox.backoff_max) each event is counted so once (tried), as the cause;
// the turns alone go to events not tried yet before any goes again (a
// burst of culprits must not keep an innocent suspect from its turn); one
// tried already and lost alone again is the broker's doing (the sink is
// down, nobody is charged) unless it is the only one tried (a quiet sink
// with one culprit: it ends dead).
//
// This is memory, not state: a publisher that restarts, or a key slot that
// moves, starts the events afresh (sent with others), which costs at most
// more tries, never an event. At most kMaxSuspects are kept (about 10 MB);
// past that the oldest ids (UUIDv7: the earliest events) are forgotten
// first, and a burst larger than that churns: the forgotten come back sent
// with others, lose their neighbours again and push out the next oldest.
//
// Threading: the publisher's main thread only (the Dispatcher's). Methods
// that add may throw bad_alloc before they change anything; the rest do not
// throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace outbox {

class Suspects {
 public:
  static constexpr size_t kMaxSuspects = 65536;
  // How long an event sent alone keeps its sink's turn at most when its
  // answer is never judged (its batch or late group was given up without
  // a verdict; those paths clear the turn themselves).
  static constexpr int64_t kTurnMs = 300000;
  // The least time between two events' turns alone on a sink when waiting
  // ones are spread out (TurnSpacingMs).
  static constexpr int64_t kMinTurnSpacingMs = 10;

  bool empty() const noexcept { return by_id_.empty(); }
  size_t size() const noexcept { return by_id_.size(); }

  // Event `id` of sink `sink` was lost with its connection, sent with
  // others. Returns whether it is to be sent alone from now on.
  bool LostWithOthers(std::string_view id, std::string_view sink);
  // Whether event `id` is to be sent alone on `sink`.
  bool SendsAlone(std::string_view id, std::string_view sink) const noexcept;
  // Event `id`, sent alone, failed while its sink answered others. Returns
  // how many times in a row that happened (1 when it was not known).
  int FailedAlone(std::string_view id);
  // It went through, or is dead: nothing more to suspect.
  void Forget(std::string_view id) noexcept;

  // Event `id`, sent alone on `sink`, was lost with its connection: it is
  // tried. Returns whether that is the broker's doing (the sink is down,
  // nobody is charged): it was tried already since the sink's last answer,
  // and so was another one (still a suspect or not: one that ended dead
  // counts, so that a broker closing every connection kills at most one
  // event between two answers). SinkAnswered (the sink delivered
  // something) forgets who was tried, and so does the passing of renew_ms
  // (> 0) since the first of them was (now_ms on SteadyMs): a sink whose
  // only events are such messages must not keep them, and the keys behind
  // them, for good; each is tried once more per renew_ms (the publisher
  // passes outbox.backoff_max), so a broker that closes every connection
  // costs a suspect at most one attempt per renew_ms.
  bool LostAloneUnanswered(std::string_view sink, std::string_view id, int64_t now_ms = 0,
                           int64_t renew_ms = 0);
  bool TriedAlone(std::string_view sink, std::string_view id) const noexcept;
  // How many events sent alone on `sink` are not tried (as remembered: an
  // event deleted meanwhile still counts).
  size_t UntriedAlone(std::string_view sink) const noexcept;
  // Whether event `id`, tried alone on `sink`, waits for the sink's events
  // not tried yet to have their turns: only until renew_ms (> 0) has passed
  // since the first of them was tried (what LostAloneUnanswered forgets
  // then), so that an untried one that never comes back (its route paused,
  // its key slot moved to another publisher, the row deleted) holds it
  // that long at most.
  bool WaitsForUntried(std::string_view sink, std::string_view id, int64_t now_ms,
                       int64_t renew_ms) const noexcept;
  // When who was tried on `sink` is forgotten (on SteadyMs; 0 when nobody
  // is tried or renew_ms is 0).
  int64_t TriedUntilMs(std::string_view sink, int64_t renew_ms) const noexcept;
  void SinkAnswered(std::string_view sink) noexcept;

  // Whose turn it is to be sent alone on `sink`: true, with the ticket of
  // the batch that sent it, while an event of that sink is out alone and
  // not yet judged (at most kTurnMs after it was sent, now_ms on SteadyMs).
  bool Out(std::string_view sink, int64_t now_ms, uint64_t *ticket) const noexcept;
  void SentAlone(std::string_view sink, std::string_view id, uint64_t ticket, int64_t now_ms);
  // The event out alone on `sink` was judged at now_ms (or `id` is not it:
  // nothing): how long that took is the sink's turn spacing.
  void Judged(std::string_view sink, std::string_view id, int64_t now_ms) noexcept;
  // How far apart the events waiting for their turn alone on `sink` are
  // made due: the last turn's length, at least kMinTurnSpacingMs. Due all
  // at once, each cycle would claim them all, send one and write the rest
  // back (a burst of a hundred such events rewrote thousands of rows a
  // second, and filled the claims other events wait for).
  int64_t TurnSpacingMs(std::string_view sink) const noexcept;
  // Every batch and late group was given up: nobody is out alone.
  void ClearTurns() noexcept { out_.clear(); }

 private:
  struct Suspect {
    std::string sink;
    bool alone = false;    // lost with others twice: sent alone
    int failed_alone = 0;  // failures alone in a row
  };
  struct Turn {
    std::string id;
    uint64_t ticket = 0;
    int64_t sent_ms = 0;
    int64_t until_ms = 0;
  };
  using IdSet = std::set<std::string, std::less<>>;
  using ById = std::map<std::string, Suspect, std::less<>>;
  // No longer sent alone on its sink: out of its sink's count and tried set.
  void NotAlone(ById::iterator it) noexcept;

  ById by_id_;
  std::map<std::string, size_t, std::less<>> alone_;     // by sink: how many are sent alone
  std::map<std::string, Turn, std::less<>> out_;         // by sink
  std::map<std::string, int64_t, std::less<>> turn_ms_;  // by sink: the last turn's length
  // A sink's events lost alone with their connection since its last answer
  // (or since renew_ms passed: LostAloneUnanswered).
  struct Tried {
    IdSet ids;         // each one a suspect sent alone on the sink
    size_t gone = 0;   // how many more were tried and are no longer suspects
    int64_t since_ms;  // when the first of them was (SteadyMs)
  };
  std::map<std::string, Tried, std::less<>> tried_;  // by sink
};

}  // namespace outbox
