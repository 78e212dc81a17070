-- The lock module's INFO fields for redis_exporter's --script option: the
-- exporter turns each name/value pair into
-- redis_script_values{key="<name>"}. Every numeric field of INFO lock, as
-- it is; each histogram (lock_wait_time_ms, lock_hold_time_ms) as
-- <name>_count, _sum, _p50, _p90, _p99 and _max; and three derived values:
--   lock_module_loaded   1 when the server has the module (0: INFO lock is empty)
--   lock_granting        1 when the node grants new locks now: no start-up or
--                        promotion quarantine, and no evicting policy refused
--   lock_protections_off_count  how many protections a setting turns off
-- The exporter's user needs +eval (or +evalsha) and +info.
local info = redis.call('INFO', 'lock')
local out = {}
local function put(name, value)
  out[#out + 1] = name
  out[#out + 1] = tostring(value)
end
local fields = {}
for name, value in string.gmatch(info, '(lock_[%w_]+):([^\r\n]*)') do
  fields[name] = value
end
if fields['lock_grants'] == nil then
  put('lock_module_loaded', 0)
  return out
end
put('lock_module_loaded', 1)
for name, value in pairs(fields) do
  if string.match(value, '^%-?%d+$') then
    put(name, value)
  else
    local parts = {}
    for part, number in string.gmatch(value, '(%w+)=(%-?%d+)') do
      parts[part] = number
    end
    if parts['count'] ~= nil then
      for _, part in ipairs({'count', 'sum', 'p50', 'p90', 'p99', 'max'}) do
        put(name .. '_' .. part, parts[part] or 0)
      end
    end
  end
end
local refusing = fields['lock_evictable'] == '1' and fields['lock_eviction_mode'] == 'refuse'
put('lock_granting', (fields['lock_quarantine'] == '0' and not refusing) and 1 or 0)
local off = 0
if fields['lock_protections_off'] ~= 'none' then
  for _ in string.gmatch(fields['lock_protections_off'] or '', '[^,]+') do
    off = off + 1
  end
end
put('lock_protections_off_count', off)
return out
