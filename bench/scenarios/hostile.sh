# hostile: the hostile Internet a large list meets — 20,000 members over 500 Zipf domains where 30 % of the
# members are at one large provider whose four MX hosts share one rate limit (300 messages/s,
# 451 4.7.28 past it; 421 4.7.28 after 100 messages per connection; each of its domains
# published with a different pair of the four hosts), 2 % on hosts that drop each recipient's
# first attempt mid-DATA, 2 % greylisting for 60 s (half of them say so in the reply), 2 % hung,
# 1 % refused, 2 % slow (500 ms a reply), 0.5 % unknown users; and
# 0.1 % on tarpits (every reply one byte at a time, 300 ms a byte, 4 sessions a host), 1 % behind
# a hung primary MX with a working secondary, 1 % behind an MX name whose addresses are refused,
# hung and working; a 10 KB text post. PROFILE_REPORTS adds report-tarpit.txt: t95/t100 of the
# tarpits' members alone (goal: within 2x one pipelined session per connection).
# Goals: t95 <= 10 s, every deliverable member within 120 s, 0 duplicates,
# refused-for-rate MAILs <= 1 % of the provider's copies (~6,000 here: <= 60).
MEMBERS=20000
WORLD_ARGS="--domains 500 --seed 20 --rate-limited 0.3 --rate-limit-per-sec 300 --rate-limit-per-conn 100 --drop-first-attempt 0.02 --greylist 0.02 --greylist-secs 60 --hung 0.02 --refused 0.01 --slow 0.02 --slow-delay-ms 500 --unknown-users 0.005 --tarpit 0.001 --tarpit-byte-delay-ms 300 --tarpit-max-sessions 4 --hung-primary 0.01 --dead-addrs 0.01"
PROFILE_REPORTS="tarpit"
POSTS="text:10"
TIMEOUT_SECS=900
POSTFIX=${POSTFIX:-yes}
XVERP=no
