#pragma once

// The figures of every limit, shared by a fleet on Redis: the record "limits"
// (RedisStore::ReadRecord, WriteRecord), one field per limit's identity, its line of FormatHistory
// as the value. A reload carries keys from the rules in force (Daemon::Previous); a server that
// starts has none, and reads the fleet's figures instead, so that one restarted with changed
// rules (a rolling restart of a fleet, the way many deploy a change) carries what each key
// used, as a reload would (docs/server.md, "Changing a limit").

#include <memory>

#include "server/rules/rules.h"
#include "sluice/redis_store.h"

namespace sluice::server {

// The fleet's figures of each limit (empty when there are none yet), or nullptr when Redis
// cannot answer (logged: the rules then load without them, and limits changed since start
// afresh, the worst a lost history can do). A line this server cannot read is logged and left
// out.
std::shared_ptr<const LimitHistory> ReadFleetHistory(RedisStore& redis);

// Writes this server's figures of each limit to the fleet's record, those that differ from
// what it holds, a thousand fields a call. Failures are logged: the record then lags, and a
// server restarted meanwhile carries from older figures or none.
void WriteFleetHistory(RedisStore& redis, const LimitHistory& history);

}  // namespace sluice::server
