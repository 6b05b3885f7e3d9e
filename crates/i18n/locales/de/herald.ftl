# Herald's generated mail, in German. The same messages and variables as en/herald.ftl.
# Command words in subjects and in the help (confirm, approve, reject, subscribe, …) stay as
# they are: the request parser reads them.

held-subject = Ihre Nachricht wartet auf Freigabe
held-text =
    Ihre Nachricht an { $list } wartet auf die Freigabe durch einen Moderator ({ $reason }).
    Sie hören nur wieder davon, wenn sie freigegeben wird; nach { $days } Tagen verfällt sie.

moderation-text =
    Ein Beitrag an { $list } von { $poster } wartet auf Freigabe ({ $reason }).
    Betreff: { $subject }
    Zurückgehaltener Beitrag: { $id }

    Zum Freigeben antworten Sie auf diese Nachricht (den Betreff beibehalten).
    Zum Ablehnen senden Sie eine Mail an { $request } mit diesem Betreff:

      reject { $token }

    Handelt niemand, verfällt er nach { $days } Tagen.

rejected-subject = Ihre Nachricht wurde abgelehnt
rejected-text =
    Ihre Nachricht an { $list } wurde von einem Moderator abgelehnt und wird nicht verteilt.

rejected-reason = Der Grund des Moderators:

confirmation-text =
    Jemand (wahrscheinlich Sie) hat darum gebeten, { $action ->
        [subscribe] { $who } in die Liste { $list } einzutragen.
        [unsubscribe] { $who } aus der Liste { $list } auszutragen.
        [regular] für { $who } auf der Liste { $list } einzelne Beiträge zuzustellen.
        [digest-mime] für { $who } auf der Liste { $list } MIME-Sammelnachrichten zuzustellen.
        [digest-plain] für { $who } auf der Liste { $list } Sammelnachrichten als Text zuzustellen.
       *[nomail] für { $who } auf der Liste { $list } die Zustellung auszusetzen (nomail).
    }

    Zum Bestätigen öffnen Sie diesen Link:

    {"  "}{ $url }

    oder antworten Sie einfach auf diese Nachricht (den Betreff beibehalten).

    Wenn Sie das nicht waren, beachten Sie diese Nachricht nicht: es ändert sich nichts.

welcome-subject = Willkommen bei { $name }
welcome-greeting = Willkommen auf der Mailingliste { $name }.
welcome-text =
    Sie ({ $who }) sind jetzt Mitglied von { $list }.
    Um zu schreiben, senden Sie an { $list }.
    Zum Austragen senden Sie eine Mail an { $request } mit dem Betreff 'unsubscribe' oder
    nutzen den Abmeldelink am Ende jedes Beitrags.
    Ihre Abonnements (Name, Sammelnachrichten, keine Mail) sehen und ändern Sie über einen
    Link, den Sie hier anfordern:

      { $manage }

goodbye-subject = Sie haben { $list } verlassen
goodbye-text =
    { $who } ist nicht mehr Mitglied von { $list } und erhält keine Mail der Liste mehr.
    Um wieder beizutreten, senden Sie eine Mail an { $request } mit dem Betreff 'subscribe' und
    bestätigen die Antwort.

manage-subject = Ihre Abonnements
manage-text =
    Jemand (wahrscheinlich Sie) hat einen Link angefordert, um die Abonnements von { $who } zu verwalten.

    Öffnen Sie diesen Link innerhalb von { $hours } Stunden, um Ihre Listen zu sehen, Ihren Namen
    oder die Zustellung (einzelne Beiträge, Sammelnachrichten, keine Mail) zu ändern oder sich
    auszutragen:

      { $url }

    Wenn Sie das nicht waren, beachten Sie diese Nachricht nicht: es ändert sich nichts.

request-reply-subject = Re: Ihre Anfrage an { $list }

disabled-subject = Ihr Abonnement von { $list } ist ausgesetzt
disabled-text =
    Mails der Liste { $list } an { $who } kamen wiederholt als unzustellbar zurück; Ihr
    Abonnement ist deshalb ausgesetzt: Sie erhalten keine Beiträge.

    Grund: { $reason }

    Um die Liste wieder zu erhalten, senden Sie eine Mail an { $request } mit dem Betreff
    'subscribe' und bestätigen die Antwort.

help-text =
    Dies ist die Anfrageadresse der Mailingliste { $list }.

    Senden Sie eine Mail an { $request } mit einem dieser Wörter im Betreff oder in der ersten Zeile:

      subscribe     in die Liste eintragen (Sie werden um Bestätigung gebeten)
      unsubscribe   aus der Liste austragen (Sie werden um Bestätigung gebeten)
      set digest mime|plain|off   Sammelnachrichten statt einzelner Beiträge, oder nicht
      set nomail on|off          Listenmail aussetzen (oder wieder aufnehmen), Mitglied bleiben
      help          dieser Text

# Die öffentliche Anmeldeseite (/subscribe/<list>).
page-no-list-title = Keine solche Liste
page-no-list = Unter dieser Adresse gibt es keine Liste.
page-closed-title = Geschlossene Liste
page-closed = { $list } ist eine geschlossene Liste: ihre Verwalter tragen Mitglieder ein.
subscribe-title = { $list } abonnieren
subscribe-email-label = Ihre E-Mail-Adresse
subscribe-honeypot-label = Dieses Feld leer lassen
subscribe-button = Abonnieren
subscribe-note = Wir senden eine Nachricht an diese Adresse; das Abonnement beginnt, wenn Sie ihrem Link folgen.
subscribe-bad-address = An diese E-Mail-Adresse können wir nicht schreiben.
subscribe-expired = Dieses Formular ist abgelaufen. Bitte senden Sie es erneut.
subscribe-replayed = Dieses Formular wurde bereits einmal abgeschickt. Bitte schicken Sie dieses neue ab.
subscribe-sent-title = Sehen Sie in Ihr Postfach
subscribe-sent = Wenn { $who } { $list } abonnieren kann, ist eine Bestätigungsnachricht unterwegs. Folgen Sie ihrem Link, um abzuschließen; bis dahin geschieht nichts.

# Die Bestätigungsseite (/confirm/<token>).
link-invalid-title = Link ungültig
confirm-title = Bitte bestätigen
confirm-question = { $action ->
        [subscribe] { $who } in { $list } eintragen?
        [unsubscribe] { $who } aus { $list } austragen?
        [regular] Einzelne Beiträge von { $list } an { $who } senden?
        [digest-mime] MIME-Sammelnachrichten von { $list } an { $who } senden?
        [digest-plain] Text-Sammelnachrichten von { $list } an { $who } senden?
       *[nomail] Listenmail von { $list } an { $who } aussetzen (nomail)?
    }
confirm-button = Bestätigen
confirm-done-title = Bestätigt
confirm-done = { $action ->
        [subscribe] { $who } ist jetzt in { $list } eingetragen.
        [unsubscribe] { $who } ist nicht mehr in { $list } eingetragen.
       *[other] Die Zustellung von { $list } an { $who } ist geändert.
    }
confirm-invalid = Dieser Bestätigungslink ist ungültig oder abgelaufen.
confirm-used-title = Link bereits verwendet
confirm-used = Dieser Link wurde bereits verwendet und gilt nur einmal. Es wurde nichts geändert.
confirm-superseded-title = Link nicht mehr gültig
confirm-superseded = { $who } hat { $list } verlassen, nachdem dieser Link verschickt wurde; er trägt deshalb niemanden mehr ein. Es wurde nichts geändert.
confirm-subscribe-again = Erneut bei { $list } eintragen

# Die Abmeldeseite mit einem Klick (RFC 8058).
unsub-title = Abmelden
unsub-question = { $who } von { $list } abmelden?
unsub-button = Abmelden
unsub-done-title = Abgemeldet
unsub-done = { $who } erhält keine Mail mehr von { $list }.
unsub-invalid = Dieser Abmeldelink ist ungültig.
page-list-gone-title = Liste nicht gefunden
page-list-gone = Diese Liste gibt es nicht mehr.

# Die Seite der eigenen Abonnements (/manage).
manage-title = Ihre Abonnements
manage-send-button = Link zusenden
manage-sent = Wenn { $who } hier eine Liste abonniert hat, ist eine Nachricht mit einem Link zu den Abonnements unterwegs.
manage-link-invalid = Dieser Link ist ungültig oder abgelaufen.
manage-ask-again = Einen neuen anfordern.
manage-page-title = Abonnements von { $who }
manage-none = { $who } hat hier keine Liste abonniert.
manage-receiving = erhält Mail
manage-disabled = ausgesetzt: { $reason }
manage-archive = Das Archiv der Liste
manage-archive-members = (für Mitglieder: dieser Link gehört Ihnen und gilt { $days } Tage)
manage-name-label = Ihr Name
manage-delivery-label = Zustellung
manage-language-label = Sprache
manage-language-list = die der Liste ({ $name })
manage-save = Speichern
manage-unsubscribe = Von { $list } abmelden
manage-imap = Lesen Sie die Archive Ihrer Listen mit einem Mailprogramm (IMAP):
manage-imap-user = Benutzername
manage-imap-password = Passwort
manage-download = Alles herunterladen, was dieser Server über Sie speichert
manage-unsubscribed = Sie sind von { $list } abgemeldet.
manage-not-on = Sie waren nicht in { $list } eingetragen.
manage-saved = Ihre Einstellungen für { $list } sind gespeichert.
delivery-regular = jeder Beitrag
delivery-digest-mime = Sammelnachricht (MIME)
delivery-digest-plain = Sammelnachricht (Text)
delivery-nomail = keine Mail

# Die Überschriften einer Sammelnachricht.
digest-title = { $name } Sammelnachricht, Jahrgang { $volume }, Ausgabe { $issue }
digest-topics = Themen dieser Ausgabe:
digest-preamble = Dies ist eine MIME-Sammelnachricht: jede Nachricht ist vollständig angehängt.
digest-end = Ende von { $name } Sammelnachricht, Jahrgang { $volume }, Ausgabe { $issue }
digest-no-text = [Diese Nachricht hat keinen Textteil.]

# Das Webarchiv (/archive/…).
archive-index-title = Archive
archive-count = { $count ->
        [one] eine Nachricht
       *[other] { $count } Nachrichten
    }
archive-feed = Atom-Feed
archive-members-only-title = Nur für Mitglieder
archive-members-only = Das Archiv dieser Liste ist für ihre Mitglieder. Mitglieder öffnen es über den Link auf der Seite ihrer Abonnements.
archive-members-only-ask = Einen Link per Mail anfordern
archive-not-found-title = Nicht gefunden
archive-not-found = Dieses öffentliche Archiv oder diese Nachricht gibt es nicht.
archive-month-mbox = Diesen Monat herunterladen (mbox)
archive-thread-mbox = Diesen Thread herunterladen (mbox)
archive-search-title = { $list } durchsuchen
archive-results = { $count ->
        [0] Keine Treffer für „{ $query }“
        [one] Ein Treffer für „{ $query }“
       *[other] { $count } Treffer für „{ $query }“
    }
archive-bad-date = { $field }: „{ $value }“ ist kein Datum wie 2026-11-24
archive-words-label = Wörter
archive-from-label = Von
archive-since-label = Seit
archive-until-label = Bis
archive-search-button = Suchen
archive-date = Datum
archive-from = Von
archive-subject = Betreff
archive-thread = Thread
archive-raw = Rohfassung
archive-no-subject = (kein Betreff)
archive-next-page = nächste Seite
archive-previous-page = vorige Seite
archive-page-of = Seite { $page } von { $pages }
archive-sort-label = Reihenfolge
archive-sort-newest = neueste zuerst
archive-sort-relevance = beste Treffer zuerst
archive-attachments = Anhänge
archive-unnamed = (ohne Namen)
archive-bytes = { $count ->
        [one] ein Byte
       *[other] { $count } Bytes
    }
