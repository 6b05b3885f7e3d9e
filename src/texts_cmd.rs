//! `herald texts ls|show|set|reset`: a list's own wording of Herald's messages, the CLI side of
//! `/api/v1/lists/<list>/texts` — what the web page `/admin/lists/<list>/texts`
//! edits, for operators who work from a shell. The server checks every text (it must parse as
//! the message's Fluent value and use only its fields) and answers a problem naming `text`,
//! which is printed as the error.

use crate::client::{enc, Api};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use herald_api_types::{ListTexts, SetText};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum TextsCommand {
    /// Every message a list owner may reword: its fields and the languages the list has its
    /// own text in.
    Ls { list: String },
    /// One message: its fields, the shipped text in the list's language and the list's own.
    Show { list: String, message: String },
    /// Store the list's own text of a message in a language (Fluent syntax: `{ $list }`).
    Set {
        list: String,
        message: String,
        language: String,
        /// The text itself.
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        text: Option<String>,
        /// Read the text from a file (`-` for standard input).
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Go back to the shipped text of a message in a language.
    Reset {
        list: String,
        message: String,
        language: String,
    },
}

pub async fn texts(api: &Api, cmd: TextsCommand) -> Result<()> {
    match cmd {
        TextsCommand::Ls { list } => ls(api, &list).await?,
        TextsCommand::Show { list, message } => show(api, &list, &message).await?,
        TextsCommand::Set {
            list,
            message,
            language,
            text,
            file,
        } => {
            let text = match (text, file) {
                (Some(t), _) => t,
                (None, Some(f)) if f.as_os_str() == "-" => {
                    std::io::read_to_string(std::io::stdin()).context("reading standard input")?
                }
                (None, Some(f)) => std::fs::read_to_string(&f)
                    .with_context(|| format!("reading {}", f.display()))?,
                (None, None) => bail!("give the text with --text or --file"),
            };
            api.put_json_unit(
                &format!(
                    "/api/v1/lists/{}/texts/{}/{}",
                    enc(&list),
                    enc(&message),
                    enc(&language)
                ),
                &SetText {
                    text: text.trim_end_matches(['\r', '\n']).to_string(),
                },
            )
            .await?;
            outln!("{list}: own text of {message} in {language} stored");
        }
        TextsCommand::Reset {
            list,
            message,
            language,
        } => {
            api.delete(&format!(
                "/api/v1/lists/{}/texts/{}/{}",
                enc(&list),
                enc(&message),
                enc(&language)
            ))
            .await?;
            outln!("{list}: {message} in {language} is the shipped text again");
        }
    }
    Ok(())
}

/// `texts ls`: the list's messages, their fields and the languages with an own text.
async fn ls(api: &Api, list: &str) -> Result<()> {
    let t: ListTexts = api
        .get(&format!("/api/v1/lists/{}/texts", enc(list)))
        .await?;
    outln!("{list}: language {}", t.language);
    outln!("{:<32} {:<28} OWN TEXT IN", "MESSAGE", "FIELDS");
    for m in &t.messages {
        let own: Vec<&str> = m.overrides.iter().map(|o| o.language.as_str()).collect();
        outln!(
            "{:<32} {:<28} {}",
            m.id,
            m.fields.join(" "),
            if own.is_empty() {
                "-".to_string()
            } else {
                own.join(" ")
            }
        );
    }
    Ok(())
}

/// `texts show`: one message's shipped text and the list's own texts of it.
async fn show(api: &Api, list: &str, message: &str) -> Result<()> {
    let t: ListTexts = api
        .get(&format!("/api/v1/lists/{}/texts", enc(list)))
        .await?;
    let Some(m) = t.messages.iter().find(|m| m.id == message) else {
        bail!("there is no message {message:?} (herald texts ls {list} lists them)");
    };
    outln!("message: {}", m.id);
    outln!("fields:  {}", m.fields.join(" "));
    outln!("shipped ({}):", t.language);
    for line in m.shipped.lines() {
        outln!("  {line}");
    }
    for o in &m.overrides {
        outln!("own ({}):", o.language);
        for line in o.text.lines() {
            outln!("  {line}");
        }
    }
    Ok(())
}
