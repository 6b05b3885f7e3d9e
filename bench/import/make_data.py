#!/usr/bin/env python3
"""Input for the import benchmarks (docs/benchmarks/lists-imports-web.md).

    python3 bench/import/make_data.py <out-dir> [members] [messages]

writes <out-dir>/subscribers.csv: listmonk's subscriber export (its exact header) with
`members` rows (default 1,000,000), each with JSON attributes, 1 in 100 disabled and 1 in 1,000
blocklisted; and a Mailman 2 list <out-dir>/mm2/lists/big (a config.pck like Mailman 2.1 writes)
with a pipermail mbox of `messages` messages (default 100,000) in
<out-dir>/mm2/archives/private/big.mbox/big.mbox.
"""

import os
import pickle
import sys


def subscribers(path, n):
    with open(path, 'w', newline='') as f:
        f.write('uuid,email,name,attributes,status,created_at,updated_at\n')
        for i in range(n):
            status = 'blocklisted' if i % 1000 == 999 else ('disabled' if i % 100 == 99 else 'enabled')
            f.write('%08x-0000-4000-8000-%012x,member%d@d%d.example,Member %d,'
                    '"{""city"": ""City %d"", ""plan"": {""tier"": ""t%d""}, ""n"": %d}",%s,'
                    '2024-01-01 00:00:00 +0000 UTC,2024-01-01 00:00:00 +0000 UTC\n'
                    % (i, i, i, i % 1000, i, i % 50, i % 3, i, status))


def mailman2(root, messages):
    lst = os.path.join(root, 'lists', 'big')
    os.makedirs(lst, exist_ok=True)
    config = {
        'real_name': 'Big', 'host_name': 'lists.example.org', 'subject_prefix': '[Big] ',
        'reply_goes_to_list': 0, 'max_message_size': 40, 'generic_nonmember_action': 1,
        'archive': 1, 'archive_private': 0, 'ban_list': [], 'owner': ['owner@example.org'],
        'moderator': [], 'members': {'m%d@example.org' % i: 0 for i in range(10)},
        'digest_members': {}, 'usernames': {}, 'user_options': {}, 'delivery_status': {},
    }
    with open(os.path.join(lst, 'config.pck'), 'wb') as f:
        pickle.dump(config, f, protocol=2)
    mbox_dir = os.path.join(root, 'archives', 'private', 'big.mbox')
    os.makedirs(mbox_dir, exist_ok=True)
    body = ('Some words of a list post, as lists carry them, line after line.\n') * 10
    with open(os.path.join(mbox_dir, 'big.mbox'), 'w') as f:
        for i in range(messages):
            day = 1 + i % 28
            month = 1 + (i // 28) % 12
            f.write('From poster%d@example.net  Mon Jan  1 00:00:00 2024\n' % (i % 500))
            f.write('From: Poster %d <poster%d@example.net>\n' % (i % 500, i % 500))
            f.write('To: big@lists.example.org\n')
            f.write('Subject: [Big] Topic %d\n' % (i // 5))
            f.write('Date: Mon, %02d %s 2024 10:00:00 +0000\n'
                    % (day, ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep',
                             'Oct', 'Nov', 'Dec'][month - 1]))
            f.write('Message-ID: <msg%d@example.net>\n' % i)
            if i % 5:
                f.write('In-Reply-To: <msg%d@example.net>\n' % (i - 1))
            f.write('\n%s\n' % body)


def main():
    out = sys.argv[1]
    members = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    messages = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    os.makedirs(out, exist_ok=True)
    subscribers(os.path.join(out, 'subscribers.csv'), members)
    mailman2(os.path.join(out, 'mm2'), messages)


if __name__ == '__main__':
    main()
