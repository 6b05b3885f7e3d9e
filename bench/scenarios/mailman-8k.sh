# mailman-8k: the classic Mailman list — 8,000 members at one domain, a 10 KB text post,
# every copy personalized (To:, footer, unsubscribe link).
MEMBERS=8000
WORLD_ARGS="--domains 1"
POSTS="text:10"
TIMEOUT_SECS=900
POSTFIX=${POSTFIX:-yes}
XVERP=${XVERP:-yes}
