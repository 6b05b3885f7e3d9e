# internet-100k: 100,000 members over 2,000 Zipf-sized domains, a 10 KB text post, while part of
# the Internet misbehaves: 2 % of members on hung hosts, 1 % refused, 1 % greylisting (60 s),
# 3 % slow (500 ms before each reply), 0.5 % unknown users.
MEMBERS=100000
WORLD_ARGS="--domains 2000 --seed 7 --hung 0.02 --refused 0.01 --greylist 0.01 --greylist-secs 60 --slow 0.03 --slow-delay-ms 500 --unknown-users 0.005"
POSTS="text:10"
TIMEOUT_SECS=1200
POSTFIX=${POSTFIX:-yes}
XVERP=no
