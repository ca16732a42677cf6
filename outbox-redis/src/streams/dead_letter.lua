-- Copies a given-up entry to the dead-letter stream, then acks it; an
-- error in the copy ends the script before the ack, so the entry stays
-- pending rather than lost.
-- KEYS[1]: the dead-letter stream; KEYS[2]: the stream.
-- ARGV[1]: the group; ARGV[2]: the entry id; ARGV[3..]: the copy's fields.
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
