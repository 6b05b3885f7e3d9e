# big-post: 8,000 members over 50 domains; a 220 KB multipart/related newsletter, then a 1 MB
# text post (each measured as its own run).
MEMBERS=8000
WORLD_ARGS="--domains 50 --seed 3"
POSTS="related:220 text:1024"
TIMEOUT_SECS=1200
POSTFIX=yes
XVERP=no
