# Herald's generated mail, in English (the reference catalogue: every other language has
# exactly these messages, with the same variables; crates/i18n's tests check it).
#
# Leading spaces inside a message that has a selector are written `{"  "}`: Fluent strips
# the indentation of the lines after a select expression.
#
# Variables are addresses, reasons and links Herald fills in; they are never translated.
# Subjects that carry a token (confirm, approve) keep the command word in English: a reply
# keeps the subject and the request parser reads it.

held-subject = Your message is held for moderation
held-text =
    Your message to { $list } is held for a moderator ({ $reason }).
    You will not hear again unless it is approved; it expires after { $days } days.

moderation-text =
    A post to { $list } from { $poster } is held for moderation ({ $reason }).
    Its subject: { $subject }
    Held post: { $id }

    To approve it, reply to this message (keep the subject).
    To reject it, send a mail to { $request } with this subject:

      reject { $token }

    Nobody acting, it expires after { $days } days.

rejected-subject = Your message was rejected
rejected-text =
    Your message to { $list } was rejected by a moderator and will not be distributed.

rejected-reason = The moderator's reason:

confirmation-text =
    Somebody (probably you) asked to { $action ->
        [subscribe] subscribe { $who } to
        [unsubscribe] unsubscribe { $who } from
        [regular] set regular delivery for { $who } on
        [digest-mime] set MIME digest delivery for { $who } on
        [digest-plain] set plain digest delivery for { $who } on
       *[nomail] stop list mail (nomail) for { $who } on
    } the list { $list }.

    To confirm, open this link:

    {"  "}{ $url }

    or simply reply to this message (keep the subject).

    If you did not ask for this, ignore this message: nothing changes.

welcome-subject = Welcome to { $name }
welcome-greeting = Welcome to the { $name } mailing list.
welcome-text =
    You ({ $who }) are now a member of { $list }.
    To post, write to { $list }.
    To leave, send a mail to { $request } with the subject 'unsubscribe', or use the
    unsubscribe link at the foot of any post.
    To see and change your subscriptions (name, digests, no mail), ask for a link at

      { $manage }

goodbye-subject = You have left { $list }
goodbye-text =
    { $who } is no longer a member of { $list }, and will receive no more of its mail.
    To join again, send a mail to { $request } with the subject 'subscribe' and confirm the
    answer.

manage-subject = your subscriptions
manage-text =
    Somebody (probably you) asked for a link to manage the subscriptions of { $who }.

    Open this link within { $hours } hours to see your lists, change your name or delivery
    (single posts, digests, no mail) or unsubscribe:

      { $url }

    If you did not ask for this, ignore this message: nothing changes.

request-reply-subject = Re: your request to { $list }

disabled-subject = Your subscription to { $list } is disabled
disabled-text =
    Mail from the list { $list } to { $who } has been bouncing, so your subscription is now
    disabled: you will not receive posts.

    Why: { $reason }

    To receive the list again, send a mail to { $request } with the subject
    'subscribe' and confirm the answer.

help-text =
    This is the request address of the mailing list { $list }.

    Send a mail to { $request } with one of these words in the subject or the first line:

      subscribe     join the list (you will be asked to confirm)
      unsubscribe   leave the list (you will be asked to confirm)
      set digest mime|plain|off   receive digests instead of single posts, or not
      set nomail on|off          stop (or resume) list mail, staying a member
      help          this text

# The public subscribe page (/subscribe/<list>), in the list's language. Plain text: the page
# escapes it.
page-no-list-title = No such list
page-no-list = There is no list at this address.
page-closed-title = Closed list
page-closed = { $list } is a closed list: its administrators add members.
subscribe-title = Subscribe to { $list }
subscribe-email-label = Your e-mail address
subscribe-honeypot-label = Leave this empty
subscribe-button = Subscribe
subscribe-note = We will send a message to this address; the subscription starts when you follow its link.
subscribe-bad-address = This is not an e-mail address we can write to.
subscribe-expired = This form has expired. Please send it again.
subscribe-replayed = This form was already sent once. Please send this fresh one.
subscribe-sent-title = Check your mailbox
subscribe-sent = If { $who } can subscribe to { $list }, a confirmation message is on its way. Follow its link to finish; nothing happens until then.

# The confirmation page (/confirm/<token>), in the language of the address it names, with the
# list's own wording.
link-invalid-title = Link not valid
confirm-title = Please confirm
confirm-question = { $action ->
        [subscribe] Subscribe { $who } to { $list }?
        [unsubscribe] Unsubscribe { $who } from { $list }?
        [regular] Set regular delivery for { $who } on { $list }?
        [digest-mime] Set MIME digest delivery for { $who } on { $list }?
        [digest-plain] Set plain digest delivery for { $who } on { $list }?
       *[nomail] Stop list mail (nomail) for { $who } on { $list }?
    }
confirm-button = Confirm
confirm-done-title = Confirmed
confirm-done = { $action ->
        [subscribe] { $who } is now subscribed to { $list }.
        [unsubscribe] { $who } is no longer subscribed to { $list }.
       *[other] The delivery of { $list } to { $who } is changed.
    }
confirm-invalid = This confirmation link is not valid or has expired.
confirm-used-title = Link already used
confirm-used = This link was already used, and a link works only once. Nothing was changed.
confirm-superseded-title = Link no longer valid
confirm-superseded = { $who } left { $list } after this link was sent, so it does not subscribe anyone any more. Nothing was changed.
confirm-subscribe-again = Subscribe to { $list } again

# The one-click unsubscribe page (RFC 8058 link in every copy).
unsub-title = Unsubscribe
unsub-question = Unsubscribe { $who } from { $list }?
unsub-button = Unsubscribe
unsub-done-title = Unsubscribed
unsub-done = { $who } will no longer receive mail from { $list }.
unsub-invalid = This unsubscribe link is not valid.
page-list-gone-title = List not found
page-list-gone = This list no longer exists.

# A member's subscriptions page (/manage), in the member's language.
manage-title = Your subscriptions
manage-send-button = Send me a link
manage-sent = If { $who } is subscribed to a list here, a message with a link to its subscriptions is on its way.
manage-link-invalid = This link is not valid or has expired.
manage-ask-again = Ask for a new one.
manage-page-title = Subscriptions of { $who }
manage-none = { $who } is not subscribed to any list here.
manage-receiving = receiving mail
manage-disabled = disabled: { $reason }
manage-archive = The list's archive
manage-archive-members = (for members: this link is yours, valid { $days } days)
manage-name-label = Your name
manage-delivery-label = Delivery
manage-language-label = Language
manage-language-list = the list's ({ $name })
manage-save = Save
manage-unsubscribe = Unsubscribe from { $list }
manage-imap = Read the archives of your lists with a mail program (IMAP):
manage-imap-user = user name
manage-imap-password = password
manage-download = Download everything this server holds about you
manage-unsubscribed = You are unsubscribed from { $list }.
manage-not-on = You were not on { $list }.
manage-saved = Saved your settings for { $list }.
delivery-regular = each post
delivery-digest-mime = digest (MIME)
delivery-digest-plain = digest (plain text)
delivery-nomail = no mail

# A digest's headings, in the list's language with the list's own wording.
digest-title = { $name } Digest, Vol { $volume }, Issue { $issue }
digest-topics = Today's Topics:
digest-preamble = This is a MIME digest: each message is attached in full.
digest-end = End of { $name } Digest, Vol { $volume }, Issue { $issue }
digest-no-text = [This message has no text part.]

# The web archive (/archive/…), in the list's language — a member who opened it with their key
# reads it in their own — with the list's own wording. Plain text: the pages escape it. Pages
# that name no list (the index, "not found") follow the browser's Accept-Language.
archive-index-title = Archives
archive-count = { $count ->
        [one] one message
       *[other] { $count } messages
    }
archive-feed = Atom feed
archive-members-only-title = Members only
archive-members-only = This list's archive is for its members. Members open it from the link on their subscriptions page.
archive-members-only-ask = Ask for a link to it by mail
archive-not-found-title = Not found
archive-not-found = No such public archive or message.
archive-month-mbox = Download this month (mbox)
archive-thread-mbox = Download this thread (mbox)
archive-search-title = Search { $list }
archive-results = { $count ->
        [0] No results for “{ $query }”
        [one] One result for “{ $query }”
       *[other] { $count } results for “{ $query }”
    }
archive-bad-date = { $field }: “{ $value }” is not a date like 2026-11-24
archive-words-label = Words
archive-from-label = From
archive-since-label = Since
archive-until-label = Until
archive-search-button = Search
archive-date = Date
archive-from = From
archive-subject = Subject
archive-thread = thread
archive-raw = raw
archive-no-subject = (no subject)
archive-next-page = next page
archive-previous-page = previous page
archive-page-of = page { $page } of { $pages }
archive-sort-label = Order
archive-sort-newest = newest first
archive-sort-relevance = best match first
archive-attachments = Attachments
archive-unnamed = (unnamed)
archive-bytes = { $count ->
        [one] one byte
       *[other] { $count } bytes
    }
